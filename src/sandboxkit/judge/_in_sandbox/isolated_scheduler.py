class _Run:
    """One case in flight: its two processes, the checker's report pipe, its deadline."""


def _start(i, case):
    r = _Run()
    r.i, r.case, r.data, r.size = i, case, [], 0
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    r.res_r, res_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    r.started = time.monotonic()
    r.deadline = r.started + _WALL
    cpu = _CPUS[i % len(_CPUS)] if _CPUS else None  # the case's two processes on one CPU (see _pin)
    r.sol = _fork([null, null, null, req_r, resp_w], lambda: _serve(_BASE, set(case["names"])), lambda: _pin(cpu))
    r.chk = _fork(
        [null, null, null, res_w, req_w, resp_r], lambda: _check(case), lambda: (_pin(cpu), case.update(_test_of(case)))
    )
    for fd in (req_r, req_w, resp_r, resp_w, res_w, null):
        os.close(fd)
    return r


def _finish(r, killed):
    os.close(r.res_r)
    if killed:
        _kill(r.chk)
    _, c_status, c_usage = os.wait4(r.chk, 0)
    _kill(r.sol)
    _, s_status, s_usage = os.wait4(r.sol, 0)
    cpu = c_usage.ru_utime + c_usage.ru_stime + s_usage.ru_utime + s_usage.ru_stime
    payload = b"".join(r.data).decode("utf-8", "replace")
    return _verdict(r.i, time.monotonic() - r.started, cpu, killed, c_status, s_status, payload)


def _schedule(cases, parallel, stop):
    return _run_cases(cases, parallel, stop, lambda item: _start(*item), _poll)


def _poll(running):
    # Waits for a checker's report or the nearest deadline; returns the cases that ended, with their results.
    ended = []
    wait = max(0.0, min(r.deadline for r in running) - time.monotonic())
    ready = select.select([r.res_r for r in running], [], [], wait)[0]
    for r in list(running):
        done = killed = False
        if r.res_r in ready:
            chunk = os.read(r.res_r, 65536)
            if not chunk:
                done = True
            elif r.size < 65536:
                r.data.append(chunk)
                r.size += len(chunk)
        now = time.monotonic()
        if not done and now >= r.deadline:
            # Time spent waiting for a CPU does not count against the wall limit (as in the plain harness).
            stretched = min(r.started + _WALL + _queued_s(r.chk) + _queued_s(r.sol), r.started + _WALL * _D["stretch"])
            if now < stretched:
                r.deadline = stretched
            else:
                done = killed = True
        if not done:
            continue
        running.remove(r)
        ended.append(((r.i, r.case), _finish(r, killed)))
    return ended
