def _cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _alarm(signum, frame):
    # The wall limit, stretched by the time spent waiting for a CPU (as for a child).
    now = time.monotonic()
    limit = min(_T0 + _WALL + _queued_s(os.getpid()), _T0 + _WALL * _D["stretch"])
    if now < limit:
        signal.setitimer(signal.ITIMER_REAL, limit - now)
        return
    cpu = _cpu_now() - _USED
    _report({"i": 0, "t": now - _T0, "cpu": cpu, "status": "timeout", "why": "wall" if cpu <= _CPU else "cpu"}, {"done": True})
    os._exit(0)
