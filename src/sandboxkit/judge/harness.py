"""The Python per-case harness: every case (call, assert, stdio) of one problem in ONE sandbox run.

Why: a sandbox run costs far more than a function call (process start, reset, network for
remote backends), so running ten cases as ten runs wastes ~90% of the time. But a naive
"loop over the cases in one process" lets one case's crash, ``sys.exit(0)`` or infinite loop
hide every other case, and lets the solution tamper with the loop that reports results.

How: the harness process (the *parent*) never runs model code. It compiles the solution
(a ``SyntaxError`` becomes a ``compile_error``), then for each case forks a *child* in its own
process group with stdin/stdout/stderr on ``/dev/null`` and the parent's report channel closed.
For a call/assert case the child runs the solution, then the case, and writes one JSON payload to a
private pipe. For a stdio case the child runs the solution as ``__main__`` with the case's input on
fd 0 and its stdout/stderr on pipes, exactly like ``python3 -u main.py < input`` (exit code included).
The parent reads under a per-case deadline (and output cap), kills the child's whole process group,
and reports one JSON line per case on its own stdout. So:

* an exception, ``sys.exit(...)``, ``os._exit(...)``, a segfault or a kill in the solution is a
  failed case (no payload = failure), never a pass, whatever the expected output is;
* a case that runs past its deadline is killed and reported as ``timeout``; later cases still run;
* a call case's return value and a stdio case's output are sent back and compared *outside* the
  sandbox, so expected values never enter it and a program cannot forge a pass without producing
  the right value. (An assert
  case runs test code in the solution's own process, so it trusts that process, as every
  assert-based grader does.)

Return values are JSON-normalised in the child (tuples become lists, sets sorted lists); a value
larger than :data:`VALUE_CAP` bytes is sent as a SHA-256 of its canonical JSON and compared by hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sandboxkit.judge.cases import AssertCase, CallCase, StdioCase

__all__ = ["MARK", "VALUE_CAP", "HarnessReport", "build_python_harness", "canonical_hash", "parse_harness_output"]

MARK = "@@sandboxkit-case@@ "
VALUE_CAP = 256 * 1024

#: Names LeetCode/APPS-style solutions use without importing them (``List[int]`` annotations,
#: ``defaultdict``...); verl's call wrapper star-imports the same kind of set.
PRELUDE = """\
from typing import *
import bisect, collections, functools, heapq, itertools, math, operator, random, re, string, sys
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, lru_cache, reduce
from heapq import heapify, heappop, heappush, heappushpop, heapreplace, nlargest, nsmallest
from itertools import accumulate, combinations, count, groupby, permutations, product
from bisect import bisect, bisect_left, bisect_right, insort
from math import ceil, comb, factorial, floor, gcd, inf, isqrt, log, log2, sqrt
"""

_TEMPLATE = r"""
import base64, builtins, hashlib, io, json, os, select, shutil, signal, sys, tempfile, time, traceback
_D = json.loads(base64.b64decode("__DATA__").decode("utf-8"))
_MARK = __MARK__
_CAP = __CAP__
_SRC = "main.py"
_OUT = os.dup(1)
_ENC = getattr(sys.stdout, "encoding", None) or "utf-8"
_ERRORS = getattr(sys.stdout, "errors", None) or "strict"


def _report(obj):
    data = (_MARK + json.dumps(obj) + "\n").encode("utf-8")
    while data:
        data = data[os.write(_OUT, data):]


_BASE = {"__name__": "__solution__", "__builtins__": builtins}
if _D["prelude"]:
    exec(compile(_D["prelude"], "<prelude>", "exec"), _BASE)
try:
    _CODE = compile(_D["source"], _SRC, "exec")
except (SyntaxError, ValueError) as _e:
    _report({"syntax_error": "".join(traceback.format_exception_only(type(_e), _e)).strip()})
    sys.exit(0)
try:
    _TMP = tempfile.mkdtemp(prefix=".sandboxkit-cases-", dir=os.getcwd())  # in the workspace: reset wipes it
except OSError:
    _TMP = tempfile.mkdtemp(prefix="sandboxkit-cases-")


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


def _encode(value):
    text = json.dumps(value, default=_default)
    if len(text) <= _CAP:
        return {"json": text}
    try:
        canon = json.dumps(value, default=_default, sort_keys=True, separators=(",", ":"))
    except TypeError:
        canon = json.dumps(value, default=_default, separators=(",", ":"))
    return {"sha256": hashlib.sha256(canon.encode("utf-8")).hexdigest(), "size": len(text)}


def _where(exc, case):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in (_SRC, "<test>")]
    if not frames:
        return ""
    where = " (%s line %d)" % (frames[-1].filename, frames[-1].lineno)
    if frames[-1].filename == "<test>":
        lines = case.get("code", "").splitlines()
        if 0 < frames[-1].lineno <= len(lines):
            where += ": " + lines[frames[-1].lineno - 1].strip()[:120]
    return where


def _target(ns, name):
    if "." in name:
        owner, _, method = name.rpartition(".")
        return getattr(ns[owner](), method)
    if callable(ns.get(name)):
        return ns[name]
    if isinstance(ns.get("Solution"), type):
        return getattr(ns["Solution"](), name)
    raise NameError("function %r is not defined by the solution" % name)


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _child_function(case, w):
    # call/assert: the solution's own output is discarded; only the payload on the private pipe counts.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        ns = dict(_BASE)
        exec(_CODE, ns)
        if case["kind"] == "call":
            result = {"ok": True, "value": _encode(_target(ns, case["fn"])(*case["args"], **case["kwargs"]))}
        else:
            exec(compile(case["code"], "<test>", "exec"), ns)
            result = {"ok": True}
    except SystemExit as e:
        result = {"ok": False, "error": "the program called sys.exit(%r) before the case finished" % (e.code,)}
    except MemoryError as e:
        result = {"ok": False, "oom": True, "error": "MemoryError" + _where(e, case)}
    except BaseException as e:
        text = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()
        result = {"ok": False, "error": (text[-1] if text else type(e).__name__) + _where(e, case)}
    _write_all(w, json.dumps(result).encode("utf-8"))
    os._exit(0)


def _child_stdio(path, out_w, err_w):
    # stdio: behave like `python3 -u main.py < input`: fresh __main__ namespace, unbuffered streams,
    # the exit code of sys.exit(), a traceback and exit code 1 for an uncaught exception.
    stdin = os.open(path, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
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
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _kill(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _run(i, case):
    stdio = case["kind"] == "stdio"
    start = time.monotonic()
    if stdio:
        path = os.path.join(_TMP, "in-%d" % i)
        with open(path, "wb") as handle:
            handle.write(case["stdin"].encode("utf-8"))
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        reads, writes = {out_r: "out", err_r: "err"}, (out_w, err_w)
    else:
        res_r, res_w = os.pipe()
        reads, writes = {res_r: "res"}, (res_w,)
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        os.close(_OUT)
        for fd in reads:
            os.close(fd)
        if stdio:
            _child_stdio(path, out_w, err_w)
        _child_function(case, res_w)
    for fd in writes:
        os.close(fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    deadline = start + _D["timeout"]
    limit = _D["output_bytes"] if stdio else _CAP + 65536
    data = {name: [] for name in reads.values()}
    sizes = {name: 0 for name in reads.values()}
    open_fds = set(reads)
    timed_out = over = False
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            name = reads[fd]
            sizes[name] += len(chunk)
            if name == "err":
                data[name] = [(b"".join(data[name]) + chunk)[-4096:]]
            else:
                data[name].append(chunk)
            if sizes[name] > limit:
                over = True
        if over:
            break
    status = None
    while not (timed_out or over):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(0.001)
    _kill(pid)
    if status is None or timed_out or over:
        os.waitpid(pid, 0)
    for fd in reads:
        os.close(fd)
    elapsed = time.monotonic() - start
    if timed_out:
        return {"i": i, "status": "timeout", "t": elapsed}
    if over:
        return {"i": i, "status": "output_limit", "t": elapsed}
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    if signum == signal.SIGXCPU:
        return {"i": i, "status": "timeout", "t": elapsed}
    if signum == signal.SIGKILL:  # not ours (we kill only after a timeout): the kernel's OOM killer
        return {"i": i, "status": "memory_exceeded", "t": elapsed, "error": "killed by SIGKILL (out of memory)"}
    if stdio:
        out = b"".join(data["out"]).decode(_ENC, "replace")
        err = b"".join(data["err"]).decode(_ENC, "replace")
        state = "ok" if code == 0 else "memory_exceeded" if "MemoryError" in err[-4096:] else "error"
        return {"i": i, "status": state, "t": elapsed, "code": code, "signal": signum, "stdout": out, "stderr": err[-2000:]}
    try:
        result = json.loads(b"".join(data["res"]).decode("utf-8"))
        if not isinstance(result, dict) or "ok" not in result:
            raise ValueError
    except ValueError:
        if signum is not None:
            why = "the program was killed by signal %d before the case finished" % signum
        else:
            why = "the program exited (code %d) before the case finished" % code
        return {"i": i, "status": "error", "t": elapsed, "error": why, "signal": signum}
    if result["ok"]:
        return {"i": i, "status": "ok", "t": elapsed, "value": result.get("value")}
    state = "memory_exceeded" if result.get("oom") else "error"
    return {"i": i, "status": state, "t": elapsed, "error": str(result.get("error", ""))[:500]}


try:
    for _i, _case in enumerate(_D["cases"]):
        _res = _run(_i, _case)
        _report(_res)
        if _D["stop_on_error"] and _res["status"] != "ok":
            break
finally:
    shutil.rmtree(_TMP, ignore_errors=True)
_report({"done": True})
"""


def build_python_harness(
    source: str,
    cases: Sequence[StdioCase | AssertCase | CallCase],
    *,
    timeout_s: float,
    output_bytes: int = 1 << 20,
    stop_on_error: bool = False,
    prelude: bool = True,
) -> str:
    """The Python program that runs ``cases`` against ``source``, one forked child per case.

    Args:
        source: the solution's code.
        cases: the cases; results refer to them by position.
        timeout_s: wall-clock limit of each case.
        output_bytes: cap on each stream of a stdio case (past it: ``output_limit``).
        stop_on_error: stop after the first case that raises, crashes, exits non-zero or times out
            (wrong answers are judged outside the sandbox, so they never stop it).
        prelude: pre-import the names LeetCode-style solutions assume (``List``, ``defaultdict``...)
            for call and assert cases; stdio cases run as a plain ``__main__`` script.
    """
    items: list[dict[str, Any]] = []
    for case in cases:
        if isinstance(case, CallCase):
            items.append({"kind": "call", "fn": case.fn_name, "args": case.args, "kwargs": case.kwargs})
        elif isinstance(case, StdioCase):
            items.append({"kind": "stdio", "stdin": case.stdin})
        else:
            items.append({"kind": "assert", "code": case.code})
    data = {
        "source": source,
        "cases": items,
        "timeout": float(timeout_s),
        "output_bytes": int(output_bytes),
        "stop_on_error": stop_on_error,
        "prelude": PRELUDE if prelude else "",
    }
    blob = base64.b64encode(json.dumps(data).encode("utf-8")).decode("ascii")
    return (
        _TEMPLATE.replace("__DATA__", blob).replace("__MARK__", repr(MARK)).replace("__CAP__", str(VALUE_CAP))
    ).lstrip()


@dataclass
class HarnessReport:
    """What the harness said.

    Attributes:
        syntax_error: the compiler's message when the solution does not compile.
        results: case position -> ``{"status": "ok"|"error"|"timeout"|"memory_exceeded"|"output_limit", "t", ...}``;
            call cases add ``value`` (``{"json"}`` or ``{"sha256", "size"}``), failures ``error``, stdio cases
            ``code``, ``signal``, ``stdout`` and the tail of ``stderr``.
        finished: the harness reached its end (``False``: it was killed mid-way, e.g. by the run's limits
            or by the solution killing its parent).
    """

    syntax_error: str | None = None
    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False


def parse_harness_output(stdout: str) -> HarnessReport:
    """Read the harness's report lines; anything else on stdout is ignored."""
    report = HarnessReport()
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            item = json.loads(line[len(MARK) :])
        except json.JSONDecodeError:
            continue
        if not isinstance(item, dict):
            continue
        if "syntax_error" in item:
            report.syntax_error = str(item["syntax_error"])
            report.finished = True
        elif item.get("done"):
            report.finished = True
        elif isinstance(item.get("i"), int):
            report.results[item["i"]] = item
    return report


def canonical_hash(value: Any) -> str:
    """SHA-256 of a value's canonical JSON, as the harness computes it for large return values."""
    try:
        canon = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except TypeError:
        canon = json.dumps(value, separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()
