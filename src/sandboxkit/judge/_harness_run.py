"""Running a Python problem's cases: one sandbox run of the per-case harness, read back into cases."""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping
from typing import Any

from sandboxkit.judge._grading_state import Job, Outcome, all_compile_error, judge_run
from sandboxkit.judge._preloaded_harness import run_held
from sandboxkit.judge.cases import AssertCase, CallCase, CompareOptions, StdioCase
from sandboxkit.judge.compare import compare_values
from sandboxkit.judge.harness import (
    VALUE_CAP,
    build_python_harness,
    canonical_hash,
    parse_harness_output,
    wall_limit,
    warm_module,
)
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.models import ExecResult, RunResult, Status

__all__ = ["inline_lost", "run_harness"]

#: A harness run's own time budget never exceeds a day.
_MAX_RUN_S = 24 * 3600.0


async def run_harness(job: Job, group: list[tuple[int, StdioCase | AssertCase | CallCase]]) -> Outcome:
    cases = [c for _, c in group]
    n = len(group)
    # Every case may run alone to its wall limit, stretched (up to WALL_STRETCH times each) by time spent
    # waiting for a CPU; the run as a whole gets three times the plain limits, so a program that stalls
    # its own harness cannot hold a sandbox for long.
    budget = min(_MAX_RUN_S, n * (3 * wall_limit(job.limits.timeout_s) + 0.5) + 5.0)
    # Room for every case's report: a return value (up to VALUE_CAP) or a stdio case's output, JSON-escaped.
    per_case = (
        max(VALUE_CAP, 2 * job.limits.output_bytes) if any(isinstance(c, StdioCase) for c in cases) else VALUE_CAP
    )
    output = min(64 << 20, max(job.limits.output_bytes, n * (per_case + 1024) + 65536))
    limits = job.limits.merged(timeout_s=budget, output_bytes=output)

    def build(module: str | None) -> tuple[str, str]:
        script = build_python_harness(
            job.code,
            cases,
            timeout_s=job.limits.timeout_s,
            output_bytes=job.limits.output_bytes,
            stop_on_error=job.stop,
            module=module,
        )
        return script, ""

    result = await run_held(job, warm_module(job.pool.backend), build, limits)
    report = parse_harness_output(result.stdout)
    if report.syntax_error is not None:
        return all_compile_error(group, trim_message(report.syntax_error.splitlines()[-1]))
    outcome = Outcome()
    stopped = False
    for k, (index, case) in enumerate(group):
        item = report.results.get(k)
        if item is None:
            if stopped:
                continue  # skipped: an earlier case failed and the shaping stops there
            if report.inline == k:
                outcome.cases[index] = inline_lost(index, case, result, job.limits.timeout_s)
            else:
                outcome.cases[index] = harness_lost(index, case, result)
            continue
        outcome.cases[index] = judge_harness_item(index, case, item, job, outcome)
        if job.stop and item.get("status") != "ok":
            stopped = True
    return outcome


def harness_lost(index: int, case: StdioCase | AssertCase | CallCase, result: RunResult) -> CaseResult:
    # The harness died before reporting this case: the run's own status says why.
    status = {
        Status.TIMEOUT: "timeout",
        Status.MEMORY_EXCEEDED: "memory_exceeded",
        Status.OUTPUT_LIMIT: "output_limit",
    }.get(result.status, "error")
    tail = trim_message(result.stderr.strip().splitlines()[-1]) if result.stderr.strip() else ""
    message = f"the harness stopped before this case ({result.status.value}{': ' + tail if tail else ''})"
    return CaseResult(index=index, type=case.type, status=status, message=trim_message(message))  # type: ignore[arg-type]


def inline_lost(
    index: int, case: StdioCase | AssertCase | CallCase, result: RunResult, time_limit: float
) -> CaseResult:
    """The case ran in the harness's own process, which died before reporting: read the run's exit.

    The same verdicts as for a forked child's death (``_verdict`` in the harness): the CPU timer's
    SIGPROF, ``RLIMIT_CPU``'s SIGXCPU, or its hard limit's SIGKILL when the program ignores both, is a
    timeout; another SIGKILL (the OOM killer) is ``memory_exceeded``; any other signal or exit is an
    error. Unlike a child's, the process's CPU time is unknown here: a SIGKILL after the run took the
    time limit in wall time counts as the hard CPU limit's.
    """
    elapsed = result.duration_s
    kind = case.type
    cpu_message = f"time limit of {time_limit:g}s (CPU time) exceeded"
    if result.status is Status.MEMORY_EXCEEDED:  # the backend saw the OOM kill
        return CaseResult(index=index, type=kind, status="memory_exceeded", time_s=elapsed, message="memory limit")
    if result.signal in (signal.SIGPROF, signal.SIGXCPU) or (result.signal == signal.SIGKILL and elapsed >= time_limit):
        return CaseResult(index=index, type=kind, status="timeout", time_s=elapsed, message=cpu_message)
    if result.status is Status.TIMEOUT:  # the run's own budget: the program defeated the wall timer
        message = f"wall-clock limit of {wall_limit(time_limit):g}s exceeded (the program slept or blocked)"
        return CaseResult(index=index, type=kind, status="timeout", time_s=elapsed, message=message)
    if result.status is Status.OUTPUT_LIMIT:
        return CaseResult(index=index, type=kind, status="output_limit", time_s=elapsed, message="output limit")
    if result.signal == signal.SIGKILL:
        message = "killed by SIGKILL (out of memory)"
        return CaseResult(index=index, type=kind, status="memory_exceeded", time_s=elapsed, message=message)
    if result.signal is not None:
        message = f"the program was killed by signal {result.signal} before the case finished"
    else:
        message = f"the program exited (code {result.exit_code}) before the case finished"
    return CaseResult(index=index, type=kind, status="error", time_s=elapsed, message=message)


def timeout_result(index: int, kind: str, item: Mapping[str, Any], time_limit: float) -> CaseResult:
    """A harness's ``timeout`` report as a case result: which limit (CPU or wall) the case ran into."""
    if item.get("why") == "wall":
        message = f"wall-clock limit of {wall_limit(time_limit):g}s exceeded (the program slept or blocked)"
    else:
        message = f"time limit of {time_limit:g}s (CPU time) exceeded"
    return CaseResult(index=index, type=kind, status="timeout", time_s=float(item.get("t", 0.0)), message=message)


def judge_harness_item(
    index: int, case: StdioCase | AssertCase | CallCase, item: Mapping[str, Any], job: Job, outcome: Outcome
) -> CaseResult:
    options, time_limit = job.options, job.limits.timeout_s
    elapsed = float(item.get("t", 0.0))
    status = item.get("status")
    if status == "timeout":
        return timeout_result(index, case.type, item, time_limit)
    if status == "output_limit":
        return CaseResult(index=index, type=case.type, status="output_limit", time_s=elapsed, message="output limit")
    if status == "memory_exceeded":
        message = trim_message(str(item.get("error") or "memory limit"))
        return CaseResult(index=index, type=case.type, status="memory_exceeded", time_s=elapsed, message=message)
    if isinstance(case, StdioCase):
        result = ExecResult(
            status=Status.OK if status == "ok" else Status.FAILED,
            exit_code=item.get("code"),
            signal=item.get("signal"),
            stdout=str(item.get("stdout") or ""),
            stderr=str(item.get("stderr") or ""),
            duration_s=elapsed,
        )
        return judge_run(index, case, result, job, outcome)
    if status != "ok":
        return CaseResult(
            index=index, type=case.type, status="error", time_s=elapsed, message=trim_message(str(item.get("error")))
        )
    if isinstance(case, AssertCase):
        return CaseResult(index=index, type=case.type, status="passed", time_s=elapsed)
    matched, message = compare_returned(item.get("value"), case, options)
    return CaseResult(
        index=index, type=case.type, status="passed" if matched else "wrong_answer", time_s=elapsed, message=message
    )


def compare_returned(value: Any, case: CallCase, options: CompareOptions) -> tuple[bool, str]:
    if not isinstance(value, Mapping):
        return False, "the harness returned no value"
    if "sha256" in value:  # too large to ship back: compared exactly by canonical hash
        wanted = [case.expected]
        if case.unwrap_expected and isinstance(case.expected, list) and case.expected:
            wanted.append(case.expected[0])
        if value["sha256"] in {canonical_hash(w) for w in wanted}:
            return True, ""
        return False, f"return value ({value.get('size')} bytes of JSON) differs from the expected value"
    try:
        got = json.loads(str(value.get("json")))
    except json.JSONDecodeError:
        return False, "the return value could not be decoded"
    if isinstance(got, dict) and "__unserializable__" in got:
        return False, f"returned a {got['__unserializable__']} (not JSON-serialisable): {got.get('repr', '')}"[:200]
    return compare_values(got, case.expected, options, unwrap_expected=case.unwrap_expected)
