
def _fork(keep, body, prepare=None):
    pid = os.fork()
    if pid == 0:
        try:
            if prepare is not None:  # before _enter closes what is not kept
                prepare()
            _enter(keep)
            body()
        finally:
            os._exit(70)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    return pid


def _signal(status):
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None


def _verdict(i, elapsed, cpu, killed, c_status, s_status, payload):
    base = {"i": i, "t": elapsed, "cpu": cpu}
    c_sig, s_sig = _signal(c_status), _signal(s_status)
    c_code = os.WEXITSTATUS(c_status) if os.WIFEXITED(c_status) else None
    if killed or cpu > _CPU or signal.SIGXCPU in (c_sig, s_sig):
        return dict(base, status="timeout", why="wall" if killed and cpu <= _CPU else "cpu")
    kind, _, body = payload.partition("\n")
    if c_code == 0 and kind == "ok":
        return dict(base, status="ok")
    if c_code == 0 and kind == "cannot":
        return dict(base, status="cannot_isolate", error=body[:500])
    if c_code == 0 and kind == "died":
        if s_sig == signal.SIGKILL:  # before the test ended, so not ours: the kernel's OOM killer
            return dict(base, status="memory_exceeded", error="killed by SIGKILL (out of memory)")
        if s_sig is not None:
            return dict(base, status="error", error="the program was killed by signal %d before the case finished" % s_sig)
        if os.WIFEXITED(s_status) and body.startswith("the solution's process ended"):
            return dict(base, status="error", error="the program exited (code %d) before the case finished" % os.WEXITSTATUS(s_status))
        return dict(base, status="error", error=body[:500])
    if c_code == 0 and kind in ("err", "oom"):
        return dict(base, status="memory_exceeded" if kind == "oom" else "error", error=body[:500])
    if c_sig == signal.SIGKILL:
        return dict(base, status="memory_exceeded", error="killed by SIGKILL (out of memory)")
    why = "signal %d" % c_sig if c_sig is not None else "code %s" % c_code
    return dict(base, status="error", error="the test's process ended (%s) before the case finished" % why)


