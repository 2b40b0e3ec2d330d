def _failure(e, code):
    # The payload for an exception that ended the solution's set-up or the test, as the plain harness words it.
    if isinstance(e, SystemExit):
        return "err\nthe program called sys.exit(%r) before the case finished" % (e.code,)
    told = getattr(e, "_sk_msg", None)
    if isinstance(e, MemoryError):
        return "oom\n" + (told or "MemoryError" + _where(e, code))
    if told:
        return "err\n" + told
    lines = _exc_line(e).strip().splitlines() or [type(e).__name__]
    return "err\n" + lines[-1] + _where(e, code)


from sandboxkit._in_sandbox_std import libc, set_dumpable

# Built once where the harness's definitions are loaded (a warm fork server holds them built).
_GETCPU = libc("sched_getcpu")
libc("prctl")


def _pin(cpu=None):
    # A checker and its solution talk in strict turns (a call, its reply): on one CPU each turn is a
    # switch on that CPU; on two, each is a wake-up of the other CPU, which a VM pays dearly for
    # (a round trip measured 62 us across CPUs, 18 us on one). So both run on one CPU: this process's
    # own unless given. CPU-time limits are unchanged, and the wall limit already stretches by the
    # time spent waiting for a CPU.
    try:
        os.sched_setaffinity(0, {_GETCPU() if cpu is None else cpu})
    except BaseException:
        pass

