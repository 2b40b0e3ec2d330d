"""The source text of the isolated assert harness (see :mod:`sandboxkit.judge.isolated` for why).

Three processes per case, all forked from a harness parent that turned itself non-dumpable before
any model code existed:

* the **solution** process runs the model's code and then serves requests on two pipes (fd 3 in,
  fd 4 out): call this handle, read that attribute, iterate... It holds no other descriptor.
* the **checker** process runs the (trusted) test code. The names the solution defined are proxies
  there: calling one sends the arguments, and receives the return value as *data* (tagged JSON that
  ``json.loads`` reads without executing anything), so ``==`` in the test compares real builtin
  values in the checker, never an object the solution controls. Arguments the solution mutated in
  place are mirrored back. The checker alone holds the report pipe to the parent (fd 3).
* the parent forks both per case, waits for the checker's payload, and reports it on its stdout.

The value encoding, used both ways: a JSON scalar (``null``, ``true``/``false``, a number, a string)
is itself; every JSON array is a tagged node ``[tag, ...]``: ``l`` list, ``t`` tuple, ``s`` set, ``f``
frozenset, ``d`` dict (keys and values alternating), ``I`` a big int in hex, ``b``/``B``
bytes/bytearray (latin-1), ``c`` complex, ``r`` range, ``E`` Ellipsis, ``D`` Decimal, ``Q`` Fraction,
``O`` OrderedDict, ``dd`` defaultdict, ``C`` Counter, ``q`` deque, ``nt`` namedtuple, ``ns``/``na``
a numpy scalar/array (dtype name, shape, raw bytes in base64), ``nO`` an object-dtype array (its
elements as values), ``da``/``dt``/``ti``/``td``/``tz`` a datetime date/datetime/time/timedelta/
fixed-offset timezone (their fields), ``h`` a handle (an object that stays in the solution process), ``X`` an exception
class, ``M`` a module. Types are matched exactly (``type(v) is list``); an instance of a subclass of
one of them (an ``int`` with its own ``__eq__``, an ``IntEnum`` member) is encoded as its base value,
read with the base type's own methods, so the subclass's code never decides a comparison: from the
checker as that value alone, from the solution as ``sub`` (its handle, its class's name, the value),
which the checker rebuilds as a local subclass of the base that reads added attributes via the handle.

This string is standalone Python (stdlib only): the sandbox cannot see sandboxkit's installation.
``_D`` (the data) is prepended.
"""

from __future__ import annotations

from sandboxkit.judge._harness_source import PROCESSES, RUN_VALUES, SOLUTION
from sandboxkit.judge._isolated_codec import CODEC
from sandboxkit.judge._isolated_roles import ROLES

__all__ = ["CODEC", "IMPORTS", "INLINE_SOURCE", "LIBRARY", "RUN_INLINE", "RUN_MANY", "SOURCE"]

#: The modules every part below uses.
IMPORTS = r"""
import builtins, marshal, os, resource, select, signal, sys, time
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
"""

_HEAD = r"""
_SRC = "main.py"


def _report(*objs):
    # Several in one write: the host wakes once for them.
    _write_all(_OUT, "".join(_MARK + repr(obj) + "\n" for obj in objs).encode("utf-8"))


def _exc_line(e):
    name = type(e).__qualname__
    module = getattr(type(e), "__module__", "builtins")
    if module not in ("__main__", "builtins"):
        name = "%s.%s" % (module, name)
    try:
        text = str(e)
    except BaseException:
        text = "<exception str() failed>"
    return "%s: %s" % (name, text) if text else name


def _where(exc, code):
    last = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in (_SRC, "<test>"):
            last = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if last is None:
        return ""
    where = " (%s line %d)" % last
    if last[0] == "<test>":
        lines = code.splitlines()
        if 0 < last[1] <= len(lines):
            where += ": " + lines[last[1] - 1].strip()[:120]
    return where


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


def _libc(name):
    # A libc function returning int, through _ctypes alone: importing the ctypes package (struct, its
    # Python layer) cost every run ~1.5 ms; the package where it is loaded already or _ctypes lacks
    # this. Built once where the harness's definitions are loaded (a warm fork server holds them built).
    try:
        if "ctypes" in sys.modules:
            raise ImportError("ctypes is loaded")
        import _ctypes

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Fn(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        return _Fn(_ctypes.dlsym(_ctypes.dlopen(None, 0), name))
    except BaseException:
        try:
            import ctypes
            return getattr(ctypes.CDLL(None), name)
        except BaseException:
            return None


_PRCTL = _libc("prctl")
_GETCPU = _libc("sched_getcpu")


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


def _no_dump():
    # Non-dumpable: a process of the same uid cannot ptrace it, read its memory or open /proc/PID/fd.
    # Every checker and solution is forked from here, so the checker never is dumpable.
    if _PRCTL is None:
        return False
    try:
        _PRCTL(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        return _PRCTL(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except BaseException:
        return False

"""

#: The import path the checker keeps: the directories of ``sys.path`` the program cannot write. Found
#: where the definitions are loaded: a warm fork server (whose path never held the workspace), or the run.
_PATHS = r"""
_STDLIB = {os.path.dirname(os.__file__), os.path.dirname(getattr(select, "__file__", "") or os.__file__)}
_SAFE_PATH = frozenset(
    p for p in sys.path
    if p in _STDLIB or (p and os.path.isabs(p) and not os.access(p if os.path.isdir(p) else os.path.dirname(p), os.W_OK))
)
"""

#: Where the tests' code is: on stdin, moved into a memory file without passing through this process.
_TESTS = r"""
def _tests_file():
    # The tests (their expected answers) come on stdin, not in _D: every solution process is a fork of
    # this one, and one that searched its own memory would find them. splice moves them from the pipe
    # into a memory file in the kernel, so they are never in this process's memory; a checker reads
    # its case (pread) after the solution it checks was forked. Older interpreters (no memfd_create or
    # splice) read them through memory: the tests are then in the solutions' memory as before.
    try:
        fd = os.memfd_create("sandboxkit-tests")
    except (AttributeError, OSError):
        return b"".join(iter(lambda: os.read(0, 1 << 16), b""))
    for move in (lambda: os.splice(0, fd, 1 << 20), lambda: os.sendfile(fd, 0, None, 1 << 20)):
        try:
            while move():
                pass
            return fd
        except (AttributeError, OSError):
            continue
    _write_all(fd, b"".join(iter(lambda: os.read(0, 1 << 16), b"")))
    return fd


def _test_of(case):
    # The case's code and bytecode: carried in _D, or at case["at"] in the tests' file.
    if "at" not in case:
        return {}
    at, size = case["at"], case["len"]
    raw = os.pread(_TESTS_FD, size, at) if type(_TESTS_FD) is int else _TESTS_FD[at : at + size]
    return _JSON_LOADS(raw.decode("utf-8"))

"""

#: The parent's tools: forking a process, reading how a case ended.
_PARENT = (
    r"""
# ---------------------------------------------------------------- the parent


def _place(keep):
    # keep[k] becomes descriptor k; every other descriptor is closed. Copies above all of them first,
    # so moving one into place never overwrites another still to move.
    base = max(keep) + 1
    high = [os.dup2(fd, base + k) for k, fd in enumerate(keep)]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(keep), 1 << 16)


def _enter(keep):
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _place(keep)
    soft = max(1, -int(-_CPU // 1))
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    except (ValueError, OSError):
        pass


"""
    + PROCESSES
    + r"""

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


"""
)

#: Many cases: a forked checker and a forked solution per case, scheduled (some at once).
_SCHEDULER = r'''
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
    # Runs every case (at most ``parallel`` at once), reporting each as it ends; stops starting new
    # ones after a failure when ``stop``. Returns the cases a memory kill hit while others ran.
    pending = list(cases)
    running = []
    retry = []
    failed = False
    while pending or running:
        while pending and len(running) < parallel and not (stop and failed):
            running.append(_start(*pending.pop(0)))
        if not running:
            break
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
            res = _finish(r, killed)
            if res["status"] == "memory_exceeded" and parallel > 1:
                retry.append((r.i, r.case))  # memory is shared by the cases running together: judge it alone
                continue
            _report(res)
            failed = failed or res["status"] != "ok"
    return retry


'''

#: Set-up, before any model code exists: the run's own values, import path, non-dumpable, the test's
#: imports, the prelude. Everything from here on is the run's; everything before it only defines (a fork
#: server may hold it loaded: see ``LIBRARY``).
_SETUP = (
    RUN_VALUES
    + r"""
# ---------------------------------------------------------------- set-up
_TESTS_FD = _tests_file() if any("at" in c for c in _D["cases"]) else None

# Only directories the program cannot write stay importable: the checker imports modules after the
# solution has run, and a module planted in the workspace must not load into it.
# The finders cached for the dropped entries go too (not the whole cache: walking it cost ~0.1 ms).
for _p in [_p for _p in sys.path if _p not in _SAFE_PATH]:
    sys.path_importer_cache.pop(_p, None)
sys.path[:] = [p for p in sys.path if p in _SAFE_PATH]
if not _no_dump():
    _report({"cannot": "the harness cannot make itself non-dumpable (prctl is unavailable), so the test "
                       "could not be kept out of the solution's reach"})
    sys.exit(0)
# numpy too when the solution names it: imported once here (from the directories the program cannot
# write, before any of its code exists), not in each case's two processes (about 0.1 s of CPU each),
# and the checker rebuilds the solution's numpy values with it.
for _m in _D["imports"] + (["numpy"] if "numpy" in _D["source"] else []):
    try:
        __import__(_m)
    except BaseException:
        pass
"""
    + SOLUTION
)

#: Runs the cases with the scheduler and says it is done.
_MAIN = r"""
# ---------------------------------------------------------------- main
_cases = list(enumerate(_D["cases"]))
_stop = _D["stop_on_error"]
try:  # the CPUs cases are pinned to, in turn from this one (so concurrent runs start apart)
    _CPUS = sorted(os.sched_getaffinity(0))
    _first = _CPUS.index(_GETCPU()) if _GETCPU is not None else 0
    _CPUS = _CPUS[_first:] + _CPUS[:_first]
except BaseException:
    _CPUS = []
_cpus = len(_CPUS) or os.cpu_count() or 1
_parallel = 1 if _stop else max(1, min(len(_cases), _D["parallel"], _cpus))
for _item in _schedule(_cases, _parallel, _stop):
    _schedule([_item], 1, False)
_report({"done": True})
os._exit(0)
"""

#: A problem's only case: this process is its checker (see :func:`sandboxkit.judge.isolated.runs_inline`).
_INLINE_DEFS = r"""
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


"""

#: Runs a problem's only case with the harness process as its checker.
_INLINE_RUN = r"""
# Straight-line code, not functions: every code object the harness carries costs each run its
# unmarshalling and the pages it touches.
_ENDED = []
_req_r, _req_w = os.pipe()
_resp_r, _resp_w = os.pipe()
_null = os.open(os.devnull, os.O_RDWR)
_T0 = time.monotonic()
_pin()  # the solution, forked next, shares this process's CPU (see _pin)
_SOL = _fork([_null, _null, _null, _req_r, _resp_w], lambda: _serve(_BASE, set(_D["cases"][0]["names"])))
_D["cases"][0].update(_test_of(_D["cases"][0]))  # only now: the solution is a copy of this process
# Here, as in a forked checker: stdio on /dev/null (what the test prints cannot pose as a report), the
# report channel on 3, requests to the solution on 4, its replies on 5, nothing else.
_place([_null, _null, _null, _OUT, _req_w, _resp_r])
_OUT = 3
_USED = _cpu_now()
signal.signal(signal.SIGALRM, _inline_alarm)
signal.signal(signal.SIGPROF, _inline_cpu)
signal.setitimer(signal.ITIMER_REAL, _WALL)
signal.setitimer(signal.ITIMER_PROF, _CPU)
_soft = max(1, -int(-(_USED + _CPU) // 1))  # a backstop, should the test sit in one long C call
try:
    resource.setrlimit(resource.RLIMIT_CPU, (_soft, _soft + 1))
except (ValueError, OSError):
    pass  # a stricter inherited hard limit stays in force
_inline_end(_checked(_D["cases"][0]))
"""

#: The harness for many cases (forked checkers), as one text (:mod:`sandboxkit.judge.isolated` ships it
#: compiled).
SOURCE = IMPORTS + _HEAD + _PATHS + CODEC + _TESTS + ROLES + _PARENT + _SCHEDULER + _SETUP + _MAIN

#: The harness for a problem's only case (its checker is the harness process itself, less ``_check``).
INLINE_SOURCE = IMPORTS + _HEAD + _PATHS + CODEC + _TESTS + ROLES + _PARENT + _INLINE_DEFS + _SETUP + _INLINE_RUN

#: Both harnesses' definitions, which read nothing of a run (no ``_D``): what a warm fork server can hold
#: loaded (:meth:`sandboxkit.Backend.preload_python_module`), so that a run only executes ``RUN_MANY`` or
#: ``RUN_INLINE`` in that module's namespace.
LIBRARY = IMPORTS + _HEAD + _PATHS + CODEC + _TESTS + ROLES + _PARENT + _SCHEDULER + _INLINE_DEFS

#: The run of many cases, and of a problem's only case, after ``LIBRARY`` (and ``_D``).
RUN_MANY = _SETUP + _MAIN
RUN_INLINE = _SETUP + _INLINE_RUN
