"""The source text of the Python per-case harness, in parts (see :mod:`sandboxkit.judge.harness` for why).

The harness is compiled by the sandbox's own interpreter on every run, so its size is paid on every
graded program: only the parts a problem needs are sent (the stdio child only when there are stdio
cases, the value encoder only when there are call cases). Every module it imports at the top is one a
warm fork server keeps loaded anyway (``os``, ``resource``, ``select``, ``signal``, ``sys``, ``time``);
``json`` only when there are call cases (return values are JSON-normalised), ``traceback`` only for
a stdio case's crash, ``hashlib`` only for a huge return value. Reports are ``repr`` lines the host
reads with ``ast.literal_eval``.

These strings are standalone Python (stdlib only): the sandbox cannot see sandboxkit's installation.
"""

from __future__ import annotations

__all__ = [
    "CALL",
    "CORE",
    "CORE_RUN",
    "FUNCTION",
    "INLINE",
    "INLINE_RUN",
    "MAIN",
    "NO_STDIO",
    "PROCESSES",
    "RUN_VALUES",
    "SOLUTION",
    "STDIO",
]

#: Killing a case's process (group) and reading how long it waited for a CPU: shared with the isolated
#: harness.
PROCESSES = r"""
def _kill(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _queued_s(pid):
    try:
        with open("/proc/%d/schedstat" % pid, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0
"""

#: Set-up: data, report channel, prelude, compile once, limits, the scheduler. ``_D`` is prepended.
CORE = (
    r"""
import builtins, os, resource, select, signal, sys, time
_SRC = "main.py"


def _report(*objs):
    # repr, not json: importing json (and re with it) would cost every run milliseconds; the host
    # reads these lines with ast.literal_eval.
    text = ""
    for obj in objs:  # several in one write: the host wakes once for them
        text += _MARK + repr(obj) + "\n"
    data = text.encode("utf-8")
    while data:
        data = data[os.write(_OUT, data):]


def _exc_line(e):
    # The last line of traceback.format_exception_only, without importing traceback.
    name = type(e).__qualname__
    module = getattr(type(e), "__module__", "builtins")
    if module not in ("__main__", "builtins"):
        name = "%s.%s" % (module, name)
    try:
        text = str(e)
    except BaseException:
        text = "<exception str() failed>"
    return "%s: %s" % (name, text) if text else name


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _enter_child(keep):
    # Own process group; only the descriptors this case needs survive (another case's pipes, the
    # report channel and the pidfds are closed, so no case can read or forge another's result).
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    for target, fd in enumerate(keep):
        if fd != target:
            os.dup2(fd, target)
    os.closerange(len(keep), 1 << 16)
    soft = max(1, -int(-_CPU // 1))  # whole seconds, rounded up: the kernel's granularity
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    except (ValueError, OSError):
        pass  # a stricter inherited hard limit stays in force


"""
    + PROCESSES
    + r"""

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
    # Runs every case (at most ``parallel`` at once), reporting each as it ends; stops starting new
    # ones after a failure when ``stop``. Returns the cases a memory kill hit while others ran.
    pending = list(cases)
    running = []
    retry = []
    failed = False
    while pending or running:
        while pending and len(running) < parallel and not (stop and failed):
            c = pending.pop(0)
            _start(c, alone=parallel == 1)
            running.append(c)
        if not running:
            break
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
            res = _finish(c)
            if res["status"] == "memory_exceeded" and not c.alone:
                retry.append(c)  # memory is shared by the cases running together: judge it alone
                continue
            _report(res)
            failed = failed or res["status"] != "ok"
    return retry


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


def _where(exc, case):
    last = None
    tb = exc.__traceback__
    while tb is not None:  # the innermost frame of the solution or the test code
        if tb.tb_frame.f_code.co_filename in (_SRC, "<test>"):
            last = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if last is None:
        return ""
    where = " (%s line %d)" % last
    if last[0] == "<test>":
        lines = case.get("code", "").splitlines()
        if 0 < last[1] <= len(lines):
            where += ": " + lines[last[1] - 1].strip()[:120]
    return where


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
        result = "oom\nMemoryError" + _where(e, case)
    except BaseException as e:
        lines = _exc_line(e).strip().splitlines() or [type(e).__name__]
        result = "err\n" + lines[-1] + _where(e, case)
    return result
"""
)

#: The run's report channel (a copy of stdout) and limits, first of every run. Shared with the isolated
#: harness.
RUN_VALUES = r"""
_OUT = os.dup(1)
_MARK = _D["mark"]
_CPU = _D["cpu"]
_WALL = _D["wall"]
"""

#: The solution's namespace with the prelude, and its code compiled once (a ``syntax_error`` report and
#: the end of the run if it does not compile). Shared with the isolated harness.
SOLUTION = r"""
_BASE = {"__name__": "__solution__", "__builtins__": builtins}
if _D["prelude"]:
    exec(compile(_D["prelude"], "<prelude>", "exec"), _BASE)
try:
    _CODE = compile(_D["source"], _SRC, "exec")
except (SyntaxError, ValueError) as _e:
    _report({"syntax_error": _exc_line(_e)})
    sys.exit(0)
"""

#: The run's own set-up, after every definition: data, report channel, prelude, the solution compiled
#: once. Everything before it only defines (a warm fork server may hold it loaded: ``library``).
CORE_RUN = (
    RUN_VALUES
    + r"""
_CAP_IN = _D["value_cap"] + 65536
_ENC = getattr(sys.stdout, "encoding", None) or "utf-8"
_ERRORS = getattr(sys.stdout, "errors", None) or "strict"
"""
    + SOLUTION
)

#: Call cases: find the target, JSON-normalise the return value (a hash when it is large).
CALL = r"""
def _default(o):
    if isinstance(o, (set, frozenset)):
        try:
            return sorted(o)
        except TypeError:
            return list(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return {"__unserializable__": type(o).__name__, "repr": repr(o)[:200]}


import json


def _call(ns, case):
    name = case["fn"]
    if "." in name:
        owner, _, method = name.rpartition(".")
        target = getattr(ns[owner](), method)
    elif callable(ns.get(name)):
        target = ns[name]
    elif isinstance(ns.get("Solution"), type):
        target = getattr(ns["Solution"](), name)
    else:
        raise NameError("function %r is not defined by the solution" % name)
    value = target(*case["args"], **case["kwargs"])
    text = json.dumps(value, default=_default)
    if len(text) <= _D["value_cap"]:
        return "J" + text
    import hashlib
    try:
        canon = json.dumps(value, default=_default, sort_keys=True, separators=(",", ":"))
    except TypeError:
        canon = json.dumps(value, default=_default, separators=(",", ":"))
    return "H%s %d" % (hashlib.sha256(canon.encode("utf-8")).hexdigest(), len(text))
"""

#: Assert-only problems: no call encoder needed.
FUNCTION = r"""
def _call(ns, case):
    raise RuntimeError("no call cases in this problem")
"""

#: Stdio cases: the child behaves like ``python3 -u main.py < input``.
STDIO = r"""
import io


def _stdin_fd(text):
    # A memory file: seekable and sized like a redirected file (``os.fstat(0).st_size`` works, as
    # fast-input solutions expect), and nothing to clean up on disk.
    data = text.encode("utf-8")
    try:
        fd = os.memfd_create("stdin")
    except (AttributeError, OSError):
        import tempfile
        fd, path = tempfile.mkstemp(prefix=".sandboxkit-in-", dir=os.getcwd())
        os.unlink(path)
    _write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _stdio_verdict(c, base, code, signum):
    out = b"".join(c.data["out"]).decode(_ENC, "replace")
    err = b"".join(c.data["err"]).decode(_ENC, "replace")
    state = "ok" if code == 0 else "memory_exceeded" if "MemoryError" in err[-4096:] else "error"
    if state == "memory_exceeded" and not c.alone:
        return dict(base, status=state)
    return dict(base, status=state, code=code, signal=signum, stdout=out, stderr=err[-2000:])


def _child_stdio():
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=_ENC, errors=_ERRORS)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=_ENC, errors=_ERRORS, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=_ENC, errors="backslashreplace", write_through=True)
    sys.argv = [_SRC]
    code = 0
    try:
        exec(_CODE, {"__name__": "__main__", "__file__": _SRC, "__builtins__": builtins})
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # from the solution's frame on
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
"""

#: No stdio cases: stubs, so the core compiles.
NO_STDIO = r"""
def _stdin_fd(text):
    raise RuntimeError("no stdio cases in this problem")


def _stdio_verdict(c, base, code, signum):
    raise RuntimeError("no stdio cases in this problem")


def _child_stdio():
    raise RuntimeError("no stdio cases in this problem")
"""

#: Run everything: in parallel when every case must run, then memory-killed cases alone.
MAIN = r"""
_cases = [_Case(i, case) for i, case in enumerate(_D["cases"])]
_stop = _D["stop_on_error"]
try:
    _cpus = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    _cpus = os.cpu_count() or 1
_parallel = 1 if _stop else max(1, min(len(_cases), _D["parallel"], _cpus))
for _c in _schedule(_cases, _parallel, _stop):
    _schedule([_Case(_c.i, _c.case)], 1, False)
_report({"done": True})
"""

#: One call/assert case, run in this process instead of a forked child (see ``harness.py``): the
#: child's fork and its copied pages were most of a single-case problem's cost. The payload and its
#: reading (``_run_case``, ``_verdict``) are the child's own, so the verdicts are the same; a death
#: the process cannot report (``os._exit``, a signal, SIGXCPU, an OOM kill) the host reads from the
#: run's exit, after the ``inline`` line says the case had started (SIGPROF or SIGXCPU: a timeout).
INLINE = r"""
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
"""

#: The run of the only case, in this process (after ``INLINE``'s definitions and ``CORE_RUN``).
INLINE_RUN = r"""
# Straight-line code, not functions: every code object the harness carries costs each run its
# unmarshalling and the pages it touches.
_null = os.open(os.devnull, os.O_RDWR)  # as in a child: the solution's stdio is /dev/null
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
os.close(_null)
_report({"inline": 0})
_USED = _cpu_now()
_soft = max(1, -int(-(_USED + _CPU) // 1))  # a backstop, should the program stop SIGPROF
try:
    resource.setrlimit(resource.RLIMIT_CPU, (_soft, _soft + 1))
except (ValueError, OSError):
    pass  # a stricter inherited hard limit stays in force
_T0 = time.monotonic()
signal.signal(signal.SIGALRM, _alarm)
signal.setitimer(signal.ITIMER_REAL, _WALL)
# The time limit to the tick, not to RLIMIT_CPU's whole seconds: SIGPROF's default action ends the
# process once it has used _CPU of CPU time (the host reads that as a timeout).
signal.setitimer(signal.ITIMER_PROF, _CPU)
_payload = _run_case(_D["cases"][0]).encode("utf-8", "backslashreplace")
signal.setitimer(signal.ITIMER_PROF, 0)
signal.setitimer(signal.ITIMER_REAL, 0)
_base = {"i": 0, "t": time.monotonic() - _T0, "cpu": _cpu_now() - _USED}
if _base["cpu"] > _CPU:  # the order of _verdict's checks, for a child that exited 0
    _res = dict(_base, status="timeout", why="cpu")
elif len(_payload) > _CAP_IN:
    _res = dict(_base, status="output_limit")
else:  # _function_verdict reads c.data["res"]: a SimpleNamespace (always loaded) carries it
    _res = _function_verdict(type(sys.implementation)(data={"res": [_payload]}), _base, 0, None)
_report(_res, {"done": True})
os._exit(0)  # the solution's threads and atexit handlers never run after its case, as in a child
"""
