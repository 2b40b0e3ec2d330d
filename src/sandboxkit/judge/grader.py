"""``grade``: completion + tests -> :class:`Verdict`, with as few sandbox runs as the tests allow.

How cases are run (the batch-speed rules):

* every case of a Python problem (call, assert and stdio): **one** sandbox run of the per-case harness
  (:mod:`sandboxkit.judge.harness`), where each case runs in its own forked child with its own deadline.
* ``stdio`` cases of a compiled language without an address-space exemption (C, C++, Rust), several
  cases, on a stateful backend that runs bash: a session compiles **once** (with the first case), then
  runs the binary once per case through a bash ``exec`` launcher (same limits as a normal run).
* other ``stdio`` cases (JavaScript, Bash, Java, Go): one run per case, all cases concurrently (the pool
  bounds the load), or one after another when the shaping stops at the first failure.
* ``assert`` cases in other languages: the solution followed by the test code, one run per case.

Infrastructure errors (a :class:`~sandboxkit.errors.SandboxError` from the pool) end the grading with an
``infra_error`` verdict whose reward is ``None``; a request the backend rejects (``InvalidRequest``, e.g. a
language it cannot run) gives ``invalid``. ``grade`` itself does not raise for bad input.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.judge.banned import compile_patterns, find_banned
from sandboxkit.judge.cases import (
    AssertCase,
    CallCase,
    CompareOptions,
    InvalidTests,
    StdioCase,
    TestSuite,
    parse_compare,
    parse_tests,
)
from sandboxkit.judge.compare import compare_stdout, compare_values
from sandboxkit.judge.extract import Extraction, extract_code
from sandboxkit.judge.harness import VALUE_CAP, build_python_harness, canonical_hash, parse_harness_output
from sandboxkit.judge.shaping import Shaping, parse_shaping
from sandboxkit.judge.verdict import CaseResult, Verdict, VerdictStatus, status_from_cases, trim_message
from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["ROW_OPTIONS", "grade", "grade_many", "grade_row"]

log = logging.getLogger(__name__)

#: Keys of a grade row that override the call's defaults.
ROW_OPTIONS = ("language", "shaping", "banned_patterns", "compare", "timeout_s")

_MAX_RUN_S = 24 * 3600.0


@dataclass
class _Outcome:
    cases: dict[int, CaseResult] = field(default_factory=dict)
    compile_error: str | None = None


@dataclass(frozen=True)
class _Job:
    pool: SandboxPool
    code: str
    lang: Language
    limits: Limits
    options: CompareOptions
    stop: bool


async def grade(
    pool: SandboxPool,
    completion: str | Sequence[Mapping[str, Any]],
    tests: Any,
    *,
    language: str = "python",
    shaping: Shaping | str | Mapping[str, Any] | None = "pass_rate",
    banned_patterns: Sequence[str] | str | None = (),
    limits: Limits | None = None,
    compare: CompareOptions | Mapping[str, Any] | str | None = None,
    timeout_s: float | None = None,
) -> Verdict:
    """Grade one completion against its tests.

    Args:
        pool: where programs run.
        completion: the model's text, or a chat transcript (the last assistant turn is used).
        tests: test cases in any accepted shape (see :mod:`sandboxkit.judge.cases`).
        language: the language of the solution (name or alias).
        shaping: ``pass_rate`` (default), ``all_or_nothing``, penalties (see :mod:`sandboxkit.judge.shaping`).
        banned_patterns: substrings, or ``re:``-prefixed regexes, that fail the solution before it runs.
        limits: limits of each case's run (default: the pool's); ``timeout_s`` is per case.
        compare: output comparison options (default: the tests' own, else trailing-whitespace-insensitive).
        timeout_s: shorthand for ``limits.timeout_s``.

    Returns:
        The verdict. Never raises for bad input or a failing sandbox: those are ``invalid`` and
        ``infra_error`` verdicts with ``reward=None``.
    """
    started = time.perf_counter()
    language_name = str(language)
    try:
        shape = parse_shaping(shaping)
        lang = resolve_language(language)
        language_name = lang.name
        suite = parse_tests(tests)
        options = parse_compare(compare) or suite.compare or CompareOptions()
        patterns = compile_patterns(banned_patterns)
        _check_supported(suite, lang)
        run_limits = limits or pool.limits
        if timeout_s is not None:
            run_limits = run_limits.merged(timeout_s=_positive(timeout_s))
    except (InvalidTests, InvalidRequest, ValueError) as exc:
        return _early(started, "invalid", language_name, error=str(exc))

    total = len(suite.cases)
    extraction = extract_code(completion, lang.name)
    if not extraction.code.strip():
        error = "no code found in the completion" + ("" if extraction.method == "empty" else " (only whitespace)")
        return _early(started, "no_code", lang.name, error=error, total=total, shape=shape, extraction=extraction)
    hit = find_banned(extraction.code, patterns)
    if hit is not None:
        return _early(started, "banned", lang.name, error=hit, total=total, shape=shape, extraction=extraction)

    job = _Job(pool, extraction.code, lang, run_limits, options, shape.stop_on_first_failure)
    try:
        outcome = await _execute(job, suite)
    except InvalidRequest as exc:
        return _early(started, "invalid", lang.name, error=str(exc), total=total, extraction=extraction)
    except SandboxError as exc:
        log.info("grading hit an infrastructure error: %s", exc)
        return _early(started, "infra_error", lang.name, error=f"{exc.kind}: {exc}", total=total, extraction=extraction)
    return _finish(started, outcome, suite, shape, extraction, lang.name)


async def grade_row(pool: SandboxPool, row: Any, **defaults: Any) -> Verdict:
    """Grade one row ``{"completion", "tests", "language"?, "banned_patterns"?, "shaping"?, "compare"?, "timeout_s"?}``.

    Row values override ``defaults`` (the keyword arguments of :func:`grade`). A row that is not an
    object, or lacks ``completion`` or ``tests``, gives an ``invalid`` verdict naming what is missing.
    """
    started = time.perf_counter()
    language = str(defaults.get("language", "python"))
    if not isinstance(row, Mapping):
        return _early(started, "invalid", language, error=f"row must be a JSON object, got {type(row).__name__}")
    missing = [key for key in ("completion", "tests") if key not in row]
    if missing:
        return _early(
            started, "invalid", str(row.get("language") or language), error=f"row has no {' or '.join(missing)!s} field"
        )
    options = dict(defaults)
    options.update({key: row[key] for key in ROW_OPTIONS if row.get(key) is not None})
    if not isinstance(row["completion"], (str, list)):
        return _early(started, "invalid", language, error="completion must be a string or a list of chat messages")
    try:
        return await grade(pool, row["completion"], row["tests"], **options)
    except Exception as exc:  # a bug of ours must not lose the rest of the batch
        log.exception("internal error while grading a row")
        return _early(started, "infra_error", language, error=f"internal error: {type(exc).__name__}: {exc}")


async def grade_many(
    pool: SandboxPool,
    rows: Sequence[Any],
    *,
    on_result: Callable[[int, Verdict], None] | None = None,
    max_in_flight: int | None = None,
    **defaults: Any,
) -> list[Verdict]:
    """Grade rows concurrently; one verdict per row, in input order.

    Args:
        pool: where programs run (its caps bound the sandbox load).
        rows: grade rows (see :func:`grade_row`); malformed rows get an ``invalid`` verdict.
        on_result: called as ``on_result(index, verdict)`` when each row finishes (progress bars).
        max_in_flight: problems graded at once (default: twice the pool's ``max_concurrency``), so a
            million-row file does not create a million tasks.
        **defaults: keyword arguments of :func:`grade` applied to every row (rows override them).
    """
    results: list[Verdict | None] = [None] * len(rows)
    workers = min(len(rows), max_in_flight or max(4, 2 * pool.max_concurrency))
    pending = iter(range(len(rows)))

    async def worker() -> None:
        for index in pending:  # the workers share one iterator: each takes the next row
            verdict = await grade_row(pool, rows[index], **defaults)
            results[index] = verdict
            if on_result is not None:
                on_result(index, verdict)

    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker)
    return [
        v if v is not None else Verdict(status="infra_error", infra_error=True, error="not graded") for v in results
    ]


# --------------------------------------------------------------------------- verdict assembly


def _positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidTests(f"timeout_s must be a positive number of seconds, got {value!r}")
    return float(value)


def _check_supported(suite: TestSuite, lang: Language) -> None:
    if lang.name != "python" and any(isinstance(c, CallCase) for c in suite.cases):
        raise InvalidTests(f"call cases run Python functions; the solution's language is {lang.name!r}")


def _early(
    started: float,
    status: VerdictStatus,
    language: str,
    *,
    error: str,
    total: int = 0,
    shape: Shaping | None = None,
    extraction: Extraction | None = None,
) -> Verdict:
    reward = (shape or Shaping()).reward(status, 0, total)
    return Verdict(
        status=status,
        total=total,
        reward=reward,
        error=trim_message(error),
        extraction=extraction.method if extraction else "",
        infra_error=status == "infra_error",
        language=language,
        duration_s=time.perf_counter() - started,
    )


def _finish(
    started: float, outcome: _Outcome, suite: TestSuite, shape: Shaping, extraction: Extraction, language: str
) -> Verdict:
    total = len(suite.cases)
    cases = [
        outcome.cases.get(i) or CaseResult(index=i, type=case.type, status="skipped", message="not run")
        for i, case in enumerate(suite.cases)
    ]
    passed = sum(1 for c in cases if c.passed)
    status: VerdictStatus = "compile_error" if outcome.compile_error is not None else status_from_cases(cases)
    if outcome.compile_error is not None:
        error: str | None = f"compile error: {outcome.compile_error}"
    else:
        first = next((c for c in cases if c.status not in ("passed", "skipped")), None)
        error = f"case {first.index} ({first.type}) {first.status}: {first.message}" if first else None
    return Verdict(
        status=status,
        passed=passed,
        total=total,
        pass_rate=passed / total if total else 0.0,
        reward=shape.reward(status, passed, total),
        cases=cases,
        error=trim_message(error) if error else None,
        extraction=extraction.method,
        language=language,
        duration_s=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------- execution plan


async def _execute(job: _Job, suite: TestSuite) -> _Outcome:
    cases = list(enumerate(suite.cases))
    groups: list[tuple[Callable[[_Job, list[Any]], Awaitable[_Outcome]], list[Any]]] = []
    python = job.lang.name == "python"
    harnessed = [(i, c) for i, c in cases if python]
    programs = [(i, c) for i, c in cases if isinstance(c, AssertCase) and not python]
    stdio = [(i, c) for i, c in cases if isinstance(c, StdioCase) and not python]
    if harnessed:
        groups.append((_run_harness, harnessed))
    if stdio:
        groups.append((_run_stdio, stdio))
    if programs:
        groups.append((_run_programs, programs))
    outcome = _Outcome()
    for runner, group in groups:
        part = await runner(job, group)
        outcome.cases.update(part.cases)
        if part.compile_error is not None:
            outcome.compile_error = part.compile_error
            break
        if job.stop and any(not c.passed for c in part.cases.values()):
            break
    return outcome


def _all_compile_error(group: list[tuple[int, Any]], message: str) -> _Outcome:
    return _Outcome(
        cases={i: CaseResult(index=i, type=c.type, status="compile_error", message=message) for i, c in group},
        compile_error=message,
    )


# --------------------------------------------------------------------------- python harness


async def _run_harness(job: _Job, group: list[tuple[int, StdioCase | AssertCase | CallCase]]) -> _Outcome:
    cases = [c for _, c in group]
    script = build_python_harness(
        job.code, cases, timeout_s=job.limits.timeout_s, output_bytes=job.limits.output_bytes, stop_on_error=job.stop
    )
    n = len(group)
    budget = min(_MAX_RUN_S, n * (job.limits.timeout_s + 0.5) + 5.0)
    # Room for every case's report: a return value (up to VALUE_CAP) or a stdio case's output, JSON-escaped.
    per_case = (
        max(VALUE_CAP, 2 * job.limits.output_bytes) if any(isinstance(c, StdioCase) for c in cases) else VALUE_CAP
    )
    output = min(64 << 20, max(job.limits.output_bytes, n * (per_case + 1024) + 65536))
    limits = job.limits.merged(timeout_s=budget, output_bytes=output)
    result = await job.pool.run(script, language="python", limits=limits)
    report = parse_harness_output(result.stdout)
    if report.syntax_error is not None:
        return _all_compile_error(group, trim_message(report.syntax_error.splitlines()[-1]))
    outcome = _Outcome()
    stopped = False
    for k, (index, case) in enumerate(group):
        item = report.results.get(k)
        if item is None:
            if stopped:
                continue  # skipped: an earlier case failed and the shaping stops there
            outcome.cases[index] = _harness_lost(index, case, result)
            continue
        outcome.cases[index] = _judge_harness_item(index, case, item, job.options, job.limits.timeout_s)
        if job.stop and item.get("status") != "ok":
            stopped = True
    return outcome


def _harness_lost(index: int, case: StdioCase | AssertCase | CallCase, result: RunResult) -> CaseResult:
    # The harness died before reporting this case: the run's own status says why.
    status = {
        Status.TIMEOUT: "timeout",
        Status.MEMORY_EXCEEDED: "memory_exceeded",
        Status.OUTPUT_LIMIT: "output_limit",
    }.get(result.status, "error")
    tail = trim_message(result.stderr.strip().splitlines()[-1]) if result.stderr.strip() else ""
    message = f"the harness stopped before this case ({result.status.value}{': ' + tail if tail else ''})"
    return CaseResult(index=index, type=case.type, status=status, message=trim_message(message))  # type: ignore[arg-type]


def _judge_harness_item(
    index: int,
    case: StdioCase | AssertCase | CallCase,
    item: Mapping[str, Any],
    options: CompareOptions,
    time_limit: float,
) -> CaseResult:
    elapsed = float(item.get("t", 0.0))
    status = item.get("status")
    if status == "timeout":
        message = f"time limit of {time_limit:g}s exceeded"
        return CaseResult(index=index, type=case.type, status="timeout", time_s=elapsed, message=message)
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
        return _judge_run(index, case, result, options, time_limit)
    if status != "ok":
        return CaseResult(
            index=index, type=case.type, status="error", time_s=elapsed, message=trim_message(str(item.get("error")))
        )
    if isinstance(case, AssertCase):
        return CaseResult(index=index, type=case.type, status="passed", time_s=elapsed)
    matched, message = _compare_returned(item.get("value"), case, options)
    return CaseResult(
        index=index, type=case.type, status="passed" if matched else "wrong_answer", time_s=elapsed, message=message
    )


def _compare_returned(value: Any, case: CallCase, options: CompareOptions) -> tuple[bool, str]:
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


# --------------------------------------------------------------------------- stdio


def _judge_run(
    index: int, case: StdioCase | AssertCase, result: ExecResult, options: CompareOptions, time_limit: float
) -> CaseResult:
    kind, elapsed = case.type, result.duration_s
    if isinstance(result, RunResult) and result.status is Status.COMPILE_ERROR:
        return CaseResult(index=index, type=kind, status="compile_error", message=_compile_message(result))
    if result.status is Status.TIMEOUT:
        return CaseResult(
            index=index, type=kind, status="timeout", time_s=elapsed, message=f"time limit of {time_limit:g}s exceeded"
        )
    if result.status is Status.MEMORY_EXCEEDED:
        return CaseResult(index=index, type=kind, status="memory_exceeded", time_s=elapsed, message="memory limit")
    if result.status is Status.OUTPUT_LIMIT:
        return CaseResult(index=index, type=kind, status="output_limit", time_s=elapsed, message="output limit")
    if result.status is not Status.OK:
        return CaseResult(index=index, type=kind, status="error", time_s=elapsed, message=_failure_message(result))
    if isinstance(case, AssertCase) or case.expected_stdout is None:
        return CaseResult(index=index, type=kind, status="passed", time_s=elapsed)
    matched, message = compare_stdout(result.stdout, case.expected_stdout, options)
    status = "passed" if matched else "wrong_answer"
    return CaseResult(index=index, type=kind, status=status, time_s=elapsed, message=message)


def _failure_message(result: ExecResult) -> str:
    why = f"killed by signal {result.signal}" if result.signal else f"exit code {result.exit_code}"
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return trim_message(f"{why}: {lines[-1]}" if lines else why)


def _compile_message(result: RunResult) -> str:
    step = result.compile
    text = (step.stderr or step.stdout) if step is not None else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    first_error = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    return trim_message(first_error or "the compiler failed")


async def _run_stdio(job: _Job, group: list[tuple[int, StdioCase]]) -> _Outcome:
    caps = job.pool.backend.capabilities
    if (
        job.lang.compile is not None
        and not job.lang.virtual_memory_hungry
        and len(group) > 1
        and caps.stateful
        and "bash" in caps.languages
        and job.pool.max_sandboxes >= 2
    ):
        return await _stdio_in_session(job, group)
    return await _one_run_per_case(job, group, lambda case: job.code, job.lang.name)


async def _run_programs(job: _Job, group: list[tuple[int, AssertCase]]) -> _Outcome:
    return await _one_run_per_case(
        job, group, lambda case: job.code.rstrip("\n") + "\n\n" + case.code + "\n", job.lang.name
    )


async def _one_run_per_case(
    job: _Job, group: list[tuple[int, Any]], program: Callable[[Any], str], language: str
) -> _Outcome:
    def request(case: Any) -> RunRequest:
        stdin = case.stdin if isinstance(case, StdioCase) else None
        return RunRequest(code=program(case), language=language, stdin=stdin, limits=job.limits)

    outcome = _Outcome()
    compiled = job.lang.compile is not None
    pending = list(group)
    if job.stop or compiled:
        # One at a time while it matters: stop at the first failure, or learn about a compile error
        # from the first run instead of compiling the same broken code N times.
        while pending:
            index, case = pending.pop(0)
            result = await job.pool.run(request(case))
            verdict = _first_run_verdict(job, group, result)
            if verdict is not None:
                return verdict
            outcome.cases[index] = _judge_run(index, case, result, job.options, job.limits.timeout_s)
            if job.stop and not outcome.cases[index].passed:
                return outcome
            if not job.stop:
                break
    if pending:
        results = await job.pool.run_many([request(case) for _, case in pending])
        errors = [r for r in results if isinstance(r, SandboxError)]
        if errors:
            raise errors[0]
        for (index, case), item in zip(pending, results, strict=True):
            assert isinstance(item, RunResult)
            verdict = _first_run_verdict(job, group, item)
            if verdict is not None:
                return verdict
            outcome.cases[index] = _judge_run(index, case, item, job.options, job.limits.timeout_s)
    return outcome


def _first_run_verdict(job: _Job, group: list[tuple[int, Any]], result: RunResult) -> _Outcome | None:
    if result.status is Status.COMPILE_ERROR:
        return _all_compile_error(group, _compile_message(result))
    return None


async def _stdio_in_session(job: _Job, group: list[tuple[int, StdioCase]]) -> _Outcome:
    outcome = _Outcome()
    # The pool's own limits let the session take a warm idle sandbox; each run carries the case limits.
    async with job.pool.session() as session:
        (first_index, first_case), rest = group[0], group[1:]
        first = await session.run(job.code, language=job.lang.name, stdin=first_case.stdin, limits=job.limits)
        verdict = _first_run_verdict(job, group, first)
        if verdict is not None:
            return verdict
        outcome.cases[first_index] = _judge_run(first_index, first_case, first, job.options, job.limits.timeout_s)
        if job.stop and not outcome.cases[first_index].passed:
            return outcome
        for index, case in rest:
            result = await _run_compiled(session, job, case.stdin)
            outcome.cases[index] = _judge_run(index, case, result, job.options, job.limits.timeout_s)
            if job.stop and not outcome.cases[index].passed:
                break
    return outcome


async def _run_compiled(session: Session, job: _Job, stdin: str) -> RunResult:
    """Run the binary the session's first run compiled, under the same limits as a normal run.

    A bash ``exec`` of the binary gets exactly the limits (address space included) of the language's own
    run. Runtimes that reserve large address space (JVM, Go) need the backend's per-language exemption,
    which only a run in their own language gets, so they are not graded this way (see ``_run_stdio``).
    """
    launcher = "exec " + shlex.join(job.lang.run_argv(job.code)) + "\n"
    return await session.run(launcher, language="bash", stdin=stdin, limits=job.limits)
