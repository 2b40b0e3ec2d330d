"""What one grading carries between its runs: the job (code, limits, options) and the outcome so far.

Shared by the grader's execution plan (:mod:`sandboxkit.judge.grader`) and the Python harness runner
(:mod:`sandboxkit.judge._harness_run`), with the reading of one program run as one case (:func:`judge_run`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandboxkit.judge.cases import AssertCase, CompareOptions, StdioCase
from sandboxkit.judge.checkers import Checker
from sandboxkit.judge.compare import compare_stdout
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.languages import Language
from sandboxkit.models import ExecResult, Limits, RunResult, Status
from sandboxkit.pool import SandboxPool

__all__ = [
    "Job",
    "Outcome",
    "TimeBudget",
    "account",
    "all_compile_error",
    "charge_unrun",
    "compile_message",
    "failure_message",
    "judge_run",
    "timed_run",
]


@dataclass
class Outcome:
    """The cases judged so far (by index), a compile error, and outputs kept for a checker."""

    cases: dict[int, CaseResult] = field(default_factory=dict)
    compile_error: str | None = None
    #: stdout of the stdio cases that ran cleanly, kept for a sandboxed checker.
    outputs: dict[int, str] = field(default_factory=dict)


@dataclass
class TimeBudget:
    """The wall-clock time a caller will wait for one verdict, and who has spent it.

    Cases that run one after another (a compiled session, stop-at-first-failure) can take their time
    limit each: a program that times out in every case would push grading past the caller's deadline
    and turn its zero into ``None`` (TRL drops the sample). Blame rule: what the program can cause is
    its outcome, so when the next case cannot finish at its limit before the deadline *and* the
    program's own timed-out runs account for the shortfall, the remaining cases are charged as
    timeouts without running (:func:`out_of_time`). A right program never times out, so it is never
    charged; a shortfall from queueing or a slow sandbox is the infrastructure's (the cases run, and
    the caller's deadline gives ``None``).
    """

    #: ``time.monotonic()`` by which the verdict must be ready.
    deadline: float
    #: Seconds the program's own timed-out runs took (its doing).
    program_s: float = 0.0
    #: The largest per-run overhead seen in this grading (wall time minus compile and run), measured,
    #: so the estimate of what the next case needs follows the backend actually used.
    overhead_s: float = 0.0

    def record(self, result: RunResult, waited: float) -> None:
        """Account one run: its overhead, and its time when it timed out."""
        compile_s = result.compile.duration_s if result.compile is not None else 0.0
        self.overhead_s = max(self.overhead_s, waited - compile_s - result.duration_s)
        if result.status is Status.TIMEOUT:
            self.program_s += result.duration_s


@dataclass(frozen=True)
class Job:
    """One completion being graded: its code, language, limits, options and where time went."""

    pool: SandboxPool
    code: str
    lang: Language
    limits: Limits
    options: CompareOptions
    stop: bool
    checker: Checker | None = None
    #: Run Python assert cases' test code outside the solution's process (:mod:`sandboxkit.judge.isolated`).
    isolate_asserts: bool = False
    #: Where the time went (seconds summed over this completion's sandbox calls): ``compile_s``,
    #: ``run_s``, and ``queue_s`` (waiting for a call slot or a sandbox, plus the backend's overhead).
    timing: dict[str, float] = field(default_factory=lambda: {"queue_s": 0.0, "compile_s": 0.0, "run_s": 0.0})
    #: The caller's deadline for this verdict, when it has one (see :class:`TimeBudget`).
    budget: TimeBudget | None = None
    #: Programs of this completion per backend that ran them (``RunResult.backend``), in order of first use.
    ran_on: dict[str, int] = field(default_factory=dict)


def account(job: Job, result: RunResult, waited: float) -> None:
    """Add a run's compile, run and waiting time (``waited`` minus the two) to ``job.timing``."""
    compile_s = result.compile.duration_s if result.compile is not None else 0.0
    job.timing["compile_s"] += compile_s
    job.timing["run_s"] += result.duration_s
    job.timing["queue_s"] += max(0.0, waited - compile_s - result.duration_s)
    job.ran_on[result.backend] = job.ran_on.pop(result.backend, 0) + 1  # re-inserted: the last one is last


async def timed_run(job: Job, runner: Awaitable[RunResult]) -> RunResult:
    """Await one sandbox run and account for its time."""
    started = time.perf_counter()
    result = await runner
    waited = time.perf_counter() - started
    account(job, result, waited)
    if job.budget is not None:
        job.budget.record(result, waited)
    return result


def out_of_time(job: Job) -> bool:
    """Whether the program's own timeouts leave too little of the caller's deadline for the next case.

    True only when the next case could not finish at its time limit (plus the run overhead measured in
    this grading) before the deadline, and the time the program's timed-out runs took covers that
    shortfall: without them the case would have fit.
    """
    budget = job.budget
    if budget is None:
        return False
    needed = job.limits.timeout_s + budget.overhead_s
    left = budget.deadline - time.monotonic()
    return left < needed and budget.program_s >= needed - left


def charge_unrun(outcome: Outcome, cases: Sequence[tuple[int, StdioCase | AssertCase]], job: Job) -> None:
    """Record ``cases``, not run because the program's own timeouts used up the caller's deadline, as timeouts."""
    spent = job.budget.program_s if job.budget is not None else 0.0
    message = f"not run: the program's earlier timeouts ({spent:.1f}s) used up the time allowed for grading"
    for index, case in cases:
        outcome.cases[index] = CaseResult(index=index, type=case.type, status="timeout", message=message)


def all_compile_error(group: list[tuple[int, Any]], message: str) -> Outcome:
    """Every case of ``group`` failed to compile with ``message``."""
    return Outcome(
        cases={i: CaseResult(index=i, type=c.type, status="compile_error", message=message) for i, c in group},
        compile_error=message,
    )


def judge_run(index: int, case: StdioCase | AssertCase, result: ExecResult, job: Job, outcome: Outcome) -> CaseResult:
    """One program run read as one case: its status, else its output compared (or kept for a checker)."""
    options, time_limit = job.options, job.limits.timeout_s
    kind, elapsed = case.type, result.duration_s
    if isinstance(result, RunResult) and result.status is Status.COMPILE_ERROR:
        return CaseResult(index=index, type=kind, status="compile_error", message=compile_message(result))
    if result.status is Status.TIMEOUT:
        return CaseResult(
            index=index, type=kind, status="timeout", time_s=elapsed, message=f"time limit of {time_limit:g}s exceeded"
        )
    if result.status is Status.MEMORY_EXCEEDED:
        return CaseResult(index=index, type=kind, status="memory_exceeded", time_s=elapsed, message="memory limit")
    if result.status is Status.OUTPUT_LIMIT:
        return CaseResult(index=index, type=kind, status="output_limit", time_s=elapsed, message="output limit")
    if result.status is not Status.OK:
        return CaseResult(index=index, type=kind, status="error", time_s=elapsed, message=failure_message(result))
    if isinstance(case, AssertCase):
        return CaseResult(index=index, type=kind, status="passed", time_s=elapsed)
    if job.checker is not None:
        # The checker decides once every case has run (and may run in a sandbox of its own); it gets an
        # empty answer file when the tests give no expected output (it judges from the input alone).
        outcome.outputs[index] = result.stdout
        return CaseResult(index=index, type=kind, status="passed", time_s=elapsed, message="awaiting the checker")
    if case.expected_stdout is None:
        return CaseResult(index=index, type=kind, status="passed", time_s=elapsed)
    matched, message = compare_stdout(result.stdout, case.expected_stdout, options)
    status = "passed" if matched else "wrong_answer"
    return CaseResult(index=index, type=kind, status=status, time_s=elapsed, message=message)


def failure_message(result: ExecResult) -> str:
    why = f"killed by signal {result.signal}" if result.signal else f"exit code {result.exit_code}"
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return trim_message(f"{why}: {lines[-1]}" if lines else why)


def compile_message(result: RunResult) -> str:
    step = result.compile
    text = (step.stderr or step.stdout) if step is not None else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    first_error = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    return trim_message(first_error or "the compiler failed")
