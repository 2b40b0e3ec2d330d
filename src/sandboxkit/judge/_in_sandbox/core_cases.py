
def _pidfd(pid):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class _Case:
    def __init__(self, i, case):
        self.i, self.case, self.stdio = i, case, case["kind"] == "stdio"
        self.data = {}
        self.sizes = {}
        self.reads = {}
        self.over = self.killed = self.exited = self.draining = False
        self.status = None
        self.rusage = None


def _start(c, alone):
    c.alone = alone
    c.started = time.monotonic()
    if c.stdio:
        stdin = _stdin_fd(c.case["stdin"])
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        c.reads, keep, mine = {out_r: "out", err_r: "err"}, [stdin, out_w, err_w], (stdin, out_w, err_w)
    else:
        res_r, res_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        c.reads, keep, mine = {res_r: "res"}, [null, null, null, res_w], (null, res_w)
    c.pid = os.fork()
    if c.pid == 0:
        try:
            _enter_child(keep)
            if c.stdio:
                _child_stdio()
            _child_function(c.case, 3)
        finally:
            os._exit(70)
    for fd in mine:
        os.close(fd)
    try:
        os.setpgid(c.pid, c.pid)
    except OSError:
        pass
    c.pidfd = _pidfd(c.pid)
    c.data = {name: [] for name in c.reads.values()}
    c.sizes = {name: 0 for name in c.reads.values()}
    c.deadline = c.started + _WALL
    return c


def _finish(c):
    _kill(c.pid)
    if c.status is None:
        _, c.status, c.rusage = os.wait4(c.pid, 0)
    for fd in list(c.reads):
        os.close(fd)
    c.reads = {}
    if c.pidfd is not None:
        os.close(c.pidfd)
    return _verdict(c, time.monotonic() - c.started)


def _schedule(cases, parallel, stop):
    return _run_cases(cases, parallel, stop, lambda c: _start(c, alone=parallel == 1), _poll)


def _poll(running):
    # Waits for output, an exit or the nearest deadline; returns the cases that ended, with their results.
    ended = []
    fds = {}
    for c in running:
        for fd in c.reads:
            fds[fd] = c
        if c.pidfd is not None and not c.exited:
            fds[c.pidfd] = c
    now = time.monotonic()
    wait = max(0.0, min(c.deadline for c in running) - now)
    if all(c.pidfd is None for c in running):
        wait = min(wait, 0.002)
    ready = select.select(list(fds), [], [], wait)[0] if fds else time.sleep(wait) or []
    for fd in ready:
        c = fds[fd]
        if fd == c.pidfd:
            c.exited = True
            continue
        chunk = os.read(fd, 65536)
        name = c.reads[fd]
        if not chunk:
            del c.reads[fd]
            os.close(fd)
            continue
        c.sizes[name] += len(chunk)
        if name == "err":
            c.data[name] = [(b"".join(c.data[name]) + chunk)[-4096:]]
        else:
            c.data[name].append(chunk)
        if c.sizes[name] > (_D["output_bytes"] if c.stdio else _CAP_IN):
            c.over = True
    now = time.monotonic()
    for c in list(running):
        if c.pidfd is None and not c.exited:
            done, status, rusage = os.wait4(c.pid, os.WNOHANG)
            if done:
                c.exited, c.status, c.rusage = True, status, rusage
        if c.exited and c.reads and not c.draining:
            # It ended but something it started still holds its pipes: kill its group, then
            # give the pipes a moment to close (a daemon outside the group cannot hold us long).
            c.draining = True
            _kill(c.pid)
            c.deadline = min(c.deadline, now + 0.25)
        timed_out = now >= c.deadline
        if timed_out and not (c.exited or c.over or c.draining):
            # Time spent waiting for a CPU (the kernel's run-queue wait) does not count against the
            # wall limit: it catches a case that sleeps or blocks, not one the machine kept waiting.
            stretched = min(c.started + _WALL + _queued_s(c.pid), c.started + _WALL * _D["stretch"])
            if now < stretched:
                c.deadline = stretched
                timed_out = False
        if c.over or timed_out:
            c.killed = timed_out and not c.over and not c.exited
        elif not (c.exited and not c.reads):
            continue
        running.remove(c)
        ended.append((c, _finish(c)))
    return ended


def _cpu_s(c):
    return (c.rusage.ru_utime + c.rusage.ru_stime) if c.rusage is not None else 0.0


def _verdict(c, elapsed):
    i = c.i
    cpu = _cpu_s(c)
    status = c.status
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    base = {"i": i, "t": elapsed, "cpu": cpu}
    if c.killed or cpu > _CPU or signum == signal.SIGXCPU:
        return dict(base, status="timeout", why="wall" if c.killed and cpu <= _CPU else "cpu")
    if c.over:
        return dict(base, status="output_limit")
    if signum == signal.SIGKILL:  # not ours (we kill only after a timeout): the kernel's OOM killer
        return dict(base, status="memory_exceeded", error="killed by SIGKILL (out of memory)")
    if c.stdio:
        return _stdio_verdict(c, base, code, signum)
    return _function_verdict(c, base, code, signum)


def _function_verdict(c, base, code, signum):
    # The child's payload: "ok", "ok\nJ<json>", "ok\nH<sha256> <size>", "err\n<message>" or "oom\n<message>".
    kind, _, body = b"".join(c.data["res"]).decode("utf-8", "replace").partition("\n")
    if kind == "ok" and code == 0:
        if body.startswith("J"):
            return dict(base, status="ok", value={"json": body[1:]})
        if body.startswith("H"):
            digest, _, size = body[1:].partition(" ")
            return dict(base, status="ok", value={"sha256": digest, "size": int(size or 0)})
        return dict(base, status="ok", value=None)
    if kind in ("err", "oom") and code == 0:
        return dict(base, status="memory_exceeded" if kind == "oom" else "error", error=body[:500])
    if signum is not None:
        why = "the program was killed by signal %d before the case finished" % signum
    else:
        why = "the program exited (code %d) before the case finished" % code
    return dict(base, status="error", error=why, signal=signum)


def _child_function(case, w):
    # call/assert: the solution's own output is discarded; only the payload on the private pipe counts.
    _write_all(w, _run_case(case).encode("utf-8", "backslashreplace"))
    os._exit(0)


def _run_case(case):
    # The payload of a call/assert case (see _function_verdict), wherever the case runs.
    try:
        ns = dict(_BASE)
        exec(_CODE, ns)
        if case["kind"] == "call":
            result = "ok\n" + _call(ns, case)
        else:
            exec(compile(case["code"], "<test>", "exec"), ns)
            result = "ok"
    except SystemExit as e:
        result = "err\nthe program called sys.exit(%r) before the case finished" % (e.code,)
    except MemoryError as e:
        result = "oom\nMemoryError" + _where(e, case.get("code", ""))
    except BaseException as e:
        lines = _exc_line(e).strip().splitlines() or [type(e).__name__]
        result = "err\n" + lines[-1] + _where(e, case.get("code", ""))
    return result
