"""Assert cases whose test code runs in a process the solution never controls (``isolate_asserts``).

Why: the plain harness runs an assert case's test code in the solution's own process, so the
solution can forge the result: write the harness's success payload to the result pipe and
``os._exit(0)``, return an object whose ``__eq__`` is always true, or patch ``AssertionError``. In
RL a policy learns such forgeries (a reward the sandbox got wrong). Call cases are safe without this
(their return values are compared on the host); assert cases need the split.

How (the program is :data:`sandboxkit.judge._harness_isolated.SOURCE`): per case a *checker* process
runs the trusted test code and a *solution* process runs the model's code. The solution's names are
proxies in the checker: a call sends the arguments and gets the return value back as data (a tagged
JSON the checker decodes without executing anything), so every ``==``, ``<`` and ``in`` of the test
runs in the checker, on real builtin values. Arguments changed in place are mirrored back; builtin
exceptions (and stand-ins for the solution's own exception classes, with the same builtin bases)
are raised in the checker, so ``except ValueError`` works. The checker and the harness parent are
non-dumpable (no ptrace, no ``/proc/PID/mem`` or ``/proc/PID/fd``) and the solution holds no
descriptor but its two request pipes; only the checker holds the report pipe.

What cannot be carried as data stays in the solution process as a handle: the checker may call it,
read its attributes, iterate it, take its ``len``/``bool``/``str``, but the moment the test asks it to
compare, hash or compute (which would let the solution's code decide the outcome) the case is
*cannot isolate*: :class:`CannotIsolate`, an infrastructure error (reward ``None``), never a wrong 0
nor a forged 1. Out of scope: a solution that reads the test's source from its own memory (it is a
fork of the harness, which holds every case) to compute the expected answers.

Cases are scheduled as in the plain harness: in parallel when the shaping needs every case (a case
killed for memory while others ran is run again alone), one at a time stopping at the first failure
otherwise; each has the plain harness's CPU-time limit (the checker's and the solution's CPU summed)
and its stretched wall limit.
"""

from __future__ import annotations

import ast
import binascii
import functools
import json
import marshal
from collections.abc import Sequence
from importlib.util import MAGIC_NUMBER
from typing import Any

from sandboxkit.errors import SandboxError
from sandboxkit.judge._harness_isolated import SOURCE
from sandboxkit.judge._job import Job, Outcome, all_compile_error, timed_run
from sandboxkit.judge.cases import AssertCase
from sandboxkit.judge.harness import DEFAULT_PARALLEL, MARK, WALL_STRETCH, prelude_for, python_literal, wall_limit
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.models import RunResult, Status

__all__ = ["CannotIsolate", "build_isolated_harness", "parse_isolated_output", "run_isolated_asserts"]

#: The isolated harness's own file name in tracebacks (never shown: its frames are cut from reports).
HARNESS_FILE = "<sandboxkit-isolated-harness>"

#: A harness run's own time budget never exceeds a day.
_MAX_RUN_S = 24 * 3600.0


class CannotIsolate(SandboxError):
    """An assert case needed a value that cannot leave the solution's process as data.

    The test compared, hashed or computed with an object the solution returned (or passed the
    solution something that is not data), or the sandbox cannot make the checker non-dumpable.
    Grading it in-process would let the solution's own code decide, so the verdict is an
    infrastructure error (reward ``None``): grade such tests without ``isolate_asserts``, or make the
    solution return plain data.
    """

    kind = "cannot_isolate"


def imports_of(code: str) -> list[str]:
    """Modules the test code imports, so the harness imports them before any solution code exists."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return sorted(set(names))


def build_isolated_harness(
    source: str,
    cases: Sequence[AssertCase],
    *,
    timeout_s: float,
    stop_on_error: bool = False,
    prelude: bool = True,
    parallel: int = DEFAULT_PARALLEL,
) -> str:
    """The Python program that runs assert ``cases`` against ``source`` with the test code isolated.

    Args:
        source: the solution's code.
        cases: the assert cases; results refer to them by position.
        timeout_s: each case's CPU-time limit (the checker's and the solution's, summed).
        stop_on_error: stop after the first case that does not pass.
        prelude: pre-import the names LeetCode-style solutions assume (as the plain harness does).
        parallel: most cases run at once when ``stop_on_error`` is off (also capped by the CPUs the
            sandbox may use); a case killed for memory while others ran is run again alone.
    """
    codes = [case.code for case in cases]
    data = {
        "source": source,
        "cases": [{"code": code} for code in codes],
        "imports": sorted({name for code in codes for name in imports_of(code)}),
        "cpu": float(timeout_s),
        "wall": wall_limit(float(timeout_s)),
        "stretch": WALL_STRETCH,
        "stop_on_error": stop_on_error,
        "parallel": max(1, int(parallel)),
        "prelude": prelude_for([source, *codes]) if prelude else "",
        "mark": MARK,
    }
    try:
        json.dumps(data, allow_nan=False)
        literal = repr(data)
    except ValueError:
        literal = python_literal(data)
    bytecode = _compiled()
    return (
        "_D = " + literal + "\n"
        "import sys as _sys\n"
        f"if getattr(_sys.modules.get('_frozen_importlib_external'), 'MAGIC_NUMBER', None) == {MAGIC_NUMBER!r}:\n"
        f"    exec(__import__('marshal').loads(__import__('binascii').a2b_base64({bytecode!r})))\n"
        "else:\n"
        f"    exec(compile({SOURCE!r}, {HARNESS_FILE!r}, 'exec'))\n"
    )


@functools.lru_cache(maxsize=1)
def _compiled() -> str:
    """The harness's bytecode for this interpreter, base64 (compiling ~20 KB costs every run ~5 ms)."""
    code = compile(SOURCE, HARNESS_FILE, "exec")
    return binascii.b2a_base64(marshal.dumps(code), newline=False).decode("ascii")


def parse_isolated_output(stdout: str) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The harness's run-wide items (``syntax_error``, ``cannot``, ``done``) and its per-case items."""
    header: dict[str, Any] = {}
    results: dict[int, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            item = ast.literal_eval(line[len(MARK) :])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("i"), int):
            results[item["i"]] = item
        else:
            header.update(item)
    return header, results


async def run_isolated_asserts(job: Job, group: list[tuple[int, AssertCase]]) -> Outcome:
    """Run a Python problem's assert cases in one sandbox run of the isolated harness.

    Raises:
        CannotIsolate: a case needed a value that cannot leave the solution's process (see the class).
    """
    cases = [case for _, case in group]
    script = build_isolated_harness(job.code, cases, timeout_s=job.limits.timeout_s, stop_on_error=job.stop)
    budget = min(_MAX_RUN_S, len(group) * (3 * wall_limit(job.limits.timeout_s) + 0.5) + 5.0)
    output = max(job.limits.output_bytes, len(group) * 2048 + 65536)
    limits = job.limits.merged(timeout_s=budget, output_bytes=output)
    result = await timed_run(job, job.pool.run(script, language="python", limits=limits))
    header, results = parse_isolated_output(result.stdout)
    if "syntax_error" in header:
        return all_compile_error(group, trim_message(str(header["syntax_error"]).splitlines()[-1]))
    if "cannot" in header:
        raise CannotIsolate(str(header["cannot"]))
    outcome = Outcome()
    stopped = False
    for k, (index, case) in enumerate(group):
        item = results.get(k)
        if item is None:
            if not stopped:
                outcome.cases[index] = _lost(index, case, result)
            continue
        if item.get("status") == "cannot_isolate":
            raise CannotIsolate(f"assert case {index}: {item.get('error')}")
        outcome.cases[index] = _case_result(index, case, item, job.limits.timeout_s)
        stopped = stopped or (job.stop and not outcome.cases[index].passed)
    return outcome


def _case_result(index: int, case: AssertCase, item: dict[str, Any], time_limit: float) -> CaseResult:
    elapsed = float(item.get("t", 0.0))
    status = item.get("status")
    if status == "ok":
        return CaseResult(index=index, type=case.type, status="passed", time_s=elapsed)
    if status == "timeout":
        if item.get("why") == "wall":
            message = f"wall-clock limit of {wall_limit(time_limit):g}s exceeded (the program slept or blocked)"
        else:
            message = f"time limit of {time_limit:g}s (CPU time) exceeded"
        return CaseResult(index=index, type=case.type, status="timeout", time_s=elapsed, message=message)
    message = trim_message(str(item.get("error") or "the case failed"))
    kind = "memory_exceeded" if status == "memory_exceeded" else "error"
    return CaseResult(index=index, type=case.type, status=kind, time_s=elapsed, message=message)


def _lost(index: int, case: AssertCase, result: RunResult) -> CaseResult:
    # The harness died before reporting this case (the solution killed it, or the run's limits did).
    status = {Status.TIMEOUT: "timeout", Status.MEMORY_EXCEEDED: "memory_exceeded"}.get(result.status, "error")
    tail = trim_message(result.stderr.strip().splitlines()[-1]) if result.stderr.strip() else ""
    message = f"the harness stopped before this case ({result.status.value}{': ' + tail if tail else ''})"
    return CaseResult(index=index, type=case.type, status=status, message=trim_message(message))  # type: ignore[arg-type]
