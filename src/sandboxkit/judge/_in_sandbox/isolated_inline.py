# ---------------------------------------------------------------- a problem's only case, checked here


def _cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _inline_end(payload, killed=False, c_status=0):
    # Ends the run: stops the timers, ends and reaps the solution, reports the verdict (as _finish does
    # for a forked checker, whose exit status here is c_status: 0, or SIGXCPU's for its CPU limit).
    if _ENDED:
        return
    _ENDED.append(True)
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.monotonic() - _T0
    cpu = _cpu_now() - _USED
    for fd in (4, 5):
        os.close(fd)  # the solution reads the end of its requests, as when a forked checker exits
    _kill(_SOL)
    _, s_status, s_usage = os.wait4(_SOL, 0)
    cpu += s_usage.ru_utime + s_usage.ru_stime
    _report(_verdict(0, elapsed, cpu, killed, c_status, s_status, payload), {"done": True})
    os._exit(0)


def _inline_alarm(signum, frame):
    # The wall limit, stretched by the time spent waiting for a CPU (as for a forked case).
    if _ENDED:
        return
    now = time.monotonic()
    limit = min(_T0 + _WALL + _queued_s(os.getpid()) + _queued_s(_SOL), _T0 + _WALL * _D["stretch"])
    if now < limit:
        signal.setitimer(signal.ITIMER_REAL, limit - now)
        return
    _inline_end("", killed=True)


def _inline_cpu(signum, frame):
    # The test's own CPU time reached the limit: as a forked checker stopped by RLIMIT_CPU.
    _inline_end("", c_status=signal.SIGXCPU)


