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
* an interactive problem (checker ``{"type": "interactor", ...}``): one session compiles the solution and
  the interactor once and runs every case with the two joined by pipes (:mod:`sandboxkit.judge.interactive`).

Infrastructure errors (a :class:`~sandboxkit.errors.SandboxError` from the pool) end the grading with an
``infra_error`` verdict whose reward is ``None``; a request the backend rejects (``InvalidRequest``, e.g. a
language it cannot run) gives ``invalid``. ``grade`` itself does not raise for bad input.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from sandboxkit.errors import InvalidRequest, SandboxError, SandboxkitError
from sandboxkit.judge._grading_state import (
    Job,
    Outcome,
    TimeBudget,
    account,
    all_compile_error,
    charge_unrun,
    compile_message,
    judge_run,
    out_of_time,
    timed_run,
)
from sandboxkit.judge._harness_run import run_harness
from sandboxkit.judge._in_workers import grade_row_in_workers
from sandboxkit.judge._sessions import Attempt, run_in_sessions
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
from sandboxkit.judge.checkers import Checker, apply_checker, parse_checker
from sandboxkit.judge.extract import Extraction, extract_code
from sandboxkit.judge.interactive import run_interactive
from sandboxkit.judge.isolated import run_isolated_asserts
from sandboxkit.judge.shaping import Shaping, parse_shaping
from sandboxkit.judge.verdict import CaseResult, Verdict, VerdictStatus, status_from_cases, trim_message
from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import Limits, RunRequest, RunResult, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["ROW_OPTIONS", "grade", "grade_many", "grade_row"]

log = logging.getLogger(__name__)

#: Keys of a grade row that override the call's defaults.
ROW_OPTIONS = ("language", "shaping", "banned_patterns", "compare", "timeout_s", "checker", "isolate_asserts")


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
    checker: Checker | Mapping[str, Any] | str | None = None,
    isolate_asserts: bool = True,
    deadline_s: float | None = None,
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
        checker: a special judge for the stdio cases (default: the tests' own ``checker``, else
            comparison); see :mod:`sandboxkit.judge.checkers`.
        isolate_asserts: run Python assert cases' test code in a process of its own, so a wrong solution
            cannot forge a pass (the default; see :mod:`sandboxkit.judge.isolated`); a test that compares
            a value the solution returned that is not plain data then fails that case.
            ``False`` runs the test code in the solution's process, trusting it (about twice as fast).
        deadline_s: the seconds the caller will wait for this verdict (a reward adapter's deadline).
            Cases that run one after another and can no longer finish at their limit in time, because
            the program's own earlier timeouts used the time, are charged as timeouts without running:
            a slow program cannot turn its zero into the caller's ``None``. A right program is never
            charged this way (see :class:`~sandboxkit.judge._grading_state.TimeBudget`).

    Returns:
        The verdict. Never raises for bad input or a failing sandbox: those are ``invalid`` and
        ``infra_error`` verdicts with ``reward=None``.
    """
    started = time.perf_counter()
    budget = TimeBudget(time.monotonic() + deadline_s) if deadline_s is not None else None
    language_name = str(language)
    try:
        shape = parse_shaping(shaping)
        lang = resolve_language(language)
        language_name = lang.name
        suite = parse_tests(tests)
        options = parse_compare(compare) or suite.compare or CompareOptions()
        special = parse_checker(checker if checker is not None else suite.checker)
        if special is not None and not special.sandboxed:
            options = special.compare_options(options)
        patterns = compile_patterns(banned_patterns)
        if not isinstance(isolate_asserts, bool):
            raise InvalidTests(f"isolate_asserts must be true or false, got {isolate_asserts!r}")
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
    unwritable = _unwritable(extraction.code, lang)
    if unwritable is not None:
        return _early(
            started, "compile_error", lang.name, error=unwritable, total=total, shape=shape, extraction=extraction
        )

    sandboxed = special if special is not None and special.sandboxed else None
    job = Job(
        pool,
        extraction.code,
        lang,
        run_limits,
        options,
        shape.stop_on_first_failure,
        sandboxed,
        isolate_asserts,
        budget=budget,
    )
    try:
        outcome = await _execute(job, suite)
    except (InvalidRequest, InvalidTests) as exc:
        return _early(started, "invalid", lang.name, error=str(exc), total=total, extraction=extraction)
    except SandboxError as exc:
        log.info("grading hit an infrastructure error: %s", exc)
        return _early(started, "infra_error", lang.name, error=f"{exc.kind}: {exc}", total=total, extraction=extraction)
    return _finish(started, outcome, suite, shape, extraction, lang.name).model_copy(
        update={"timing": {k: round(v, 6) for k, v in job.timing.items()}, "backend": next(reversed(job.ran_on), "")}
    )


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
            verdict = None
            if pool._workers is not None:  # a multi-process pool: the row is graded in a host worker
                verdict = await grade_row_in_workers(pool, _grade_row_job, rows[index], defaults)
            if verdict is None:
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


async def _grade_row_job(pool: SandboxPool, row: Any, defaults: Mapping[str, Any]) -> Verdict:
    """A row as a host worker grades it (sent by name, :mod:`sandboxkit.judge._in_workers`)."""
    return await grade_row(pool, row, **defaults)


# --------------------------------------------------------------------------- verdict assembly


def _positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidTests(f"timeout_s must be a positive number of seconds, got {value!r}")
    return float(value)


#: Linux's longest file name, in bytes (NAME_MAX).
_NAME_MAX = 255


def _unwritable(code: str, lang: Language) -> str | None:
    """Why the program cannot be written to a source file (a compile error: the program's own doing).

    A backend refuses such a request (``InvalidRequest``), which would make the verdict ``invalid`` and
    the reward ``None``: a completion with a lone surrogate, or a Java class name longer than a file
    name may be, would dodge its zero.
    """
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"the code is not valid Unicode text ({exc.reason} at position {exc.start})"
    name = lang.source_name(code)
    if len(name.encode("utf-8")) > _NAME_MAX:
        return f"the code's source file name ({name[:40]!r}..., from its class name) is longer than a file name may be"
    return None


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
    started: float, outcome: Outcome, suite: TestSuite, shape: Shaping, extraction: Extraction, language: str
) -> Verdict:
    total = len(suite.cases)
    cases = [
        outcome.cases.get(i) or CaseResult(index=i, type=case.type, status="skipped", message="not run")
        for i, case in enumerate(suite.cases)
    ]
    passed = sum(1 for c in cases if c.passed)
    # A checker may give partial credit (a score in [0, 1]) to a case it did not accept.
    credit = sum(1.0 if c.passed else (c.score or 0.0) for c in cases)
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
        pass_rate=credit / total if total else 0.0,
        reward=shape.reward(status, credit, total),
        cases=cases,
        error=trim_message(error) if error else None,
        extraction=extraction.method,
        language=language,
        duration_s=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------- execution plan


async def _execute(job: Job, suite: TestSuite) -> Outcome:
    cases = list(enumerate(suite.cases))
    if job.checker is not None and job.checker.type == "interactor":
        return await run_interactive(job, job.checker, cases)  # type: ignore[arg-type]  # checked: stdio only
    groups: list[tuple[Callable[[Job, list[Any]], Awaitable[Outcome]], list[Any]]] = []
    python = job.lang.name == "python"
    isolated = [(i, c) for i, c in cases if python and job.isolate_asserts and isinstance(c, AssertCase)]
    harnessed = [(i, c) for i, c in cases if python and not (job.isolate_asserts and isinstance(c, AssertCase))]
    programs = [(i, c) for i, c in cases if isinstance(c, AssertCase) and not python]
    stdio = [(i, c) for i, c in cases if isinstance(c, StdioCase) and not python]
    if harnessed:
        groups.append((run_harness, harnessed))
    if isolated:
        groups.append((run_isolated_asserts, isolated))
    if stdio:
        groups.append((_run_stdio, stdio))
    if programs:
        groups.append((_run_programs, programs))
    outcome = Outcome()
    for runner, group in groups:
        part = await runner(job, group)
        outcome.cases.update(part.cases)
        if part.compile_error is not None:
            outcome.compile_error = part.compile_error
            break
        outcome.outputs.update(part.outputs)
        if job.stop and any(not c.passed for c in part.cases.values()):
            break
    if job.checker is not None and outcome.outputs and outcome.compile_error is None:
        await apply_checker(job.pool, job.checker, job.limits, suite, outcome.cases, outcome.outputs)
    return outcome


# --------------------------------------------------------------------------- stdio


async def _run_stdio(job: Job, group: list[tuple[int, StdioCase]]) -> Outcome:
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


async def _run_programs(job: Job, group: list[tuple[int, AssertCase]]) -> Outcome:
    return await _one_run_per_case(
        job, group, lambda case: job.code.rstrip("\n") + "\n\n" + case.code + "\n", job.lang.name
    )


async def _one_run_per_case(
    job: Job, group: list[tuple[int, Any]], program: Callable[[Any], str], language: str
) -> Outcome:
    def request(case: Any) -> RunRequest:
        stdin = case.stdin if isinstance(case, StdioCase) else None
        return RunRequest(code=program(case), language=language, stdin=stdin, limits=job.limits)

    outcome = Outcome()
    compiled = job.lang.compile is not None
    pending = list(group)
    if job.stop or compiled:
        # One at a time while it matters: stop at the first failure, or learn about a compile error
        # from the first run instead of compiling the same broken code N times.
        while pending:
            index, case = pending.pop(0)
            if out_of_time(job):
                charge_unrun(outcome, [(index, case), *pending], job)
                return outcome
            result = await timed_run(job, job.pool.run(request(case)))
            verdict = _judge(job, group, (index, case), result, outcome)
            if verdict is not None:
                return verdict
            if job.stop and not outcome.cases[index].passed:
                return outcome
            if not job.stop:
                break
    if pending:
        started = time.perf_counter()
        results = await job.pool.run_many([request(case) for _, case in pending])
        waited = time.perf_counter() - started  # the runs overlapped: each waited about this long
        for item in results:
            if isinstance(item, RunResult):
                account(job, item, waited)
        errors = [r for r in results if isinstance(r, SandboxkitError)]
        if errors:
            raise errors[0]
        for (index, case), item in zip(pending, results, strict=True):
            assert isinstance(item, RunResult)
            verdict = _judge(job, group, (index, case), item, outcome)
            if verdict is not None:
                return verdict
    return outcome


def _judge(
    job: Job, group: list[tuple[int, Any]], case: tuple[int, Any], result: RunResult, outcome: Outcome
) -> Outcome | None:
    """Judge ``case``'s run into ``outcome``; or, when the run did not compile, the group's verdict (every
    case a compile error: the same source would fail the same way for each)."""
    if result.status is Status.COMPILE_ERROR:
        return all_compile_error(group, compile_message(result))
    index, data = case
    outcome.cases[index] = judge_run(index, data, result, job, outcome)
    return None


async def _stdio_in_session(job: Job, group: list[tuple[int, StdioCase]]) -> Outcome:
    return await run_in_sessions(job, group, _stdio_session_pass)


async def _stdio_session_pass(
    job: Job, attempt: Attempt, group: list[tuple[int, StdioCase]], outcome: Outcome
) -> Outcome | None:
    """The first case's run compiles the solution in the session; the others run the binary it left.

    The pool's own limits let the session take a warm idle sandbox; each run carries the case limits.
    """
    session = attempt.session
    (first_index, first_case), rest = group[0], group[1:]
    first = await timed_run(
        job, session.run(job.code, language=job.lang.name, stdin=first_case.stdin, limits=job.limits)
    )
    attempt.program_ran = True
    verdict = _judge(job, group, (first_index, first_case), first, outcome)
    if verdict is not None:
        return verdict
    if job.stop and not outcome.cases[first_index].passed:
        return None
    for position, (index, case) in enumerate(rest):
        if out_of_time(job):
            charge_unrun(outcome, rest[position:], job)
            return None
        result = await timed_run(job, _run_compiled(session, job, case.stdin))
        outcome.cases[index] = judge_run(index, case, result, job, outcome)
        if job.stop and not outcome.cases[index].passed:
            break
    return None


async def _run_compiled(session: Session, job: Job, stdin: str) -> RunResult:
    """Run the binary the session's first run compiled, under the same limits as a normal run.

    A bash ``exec`` of the binary gets exactly the limits (address space included) of the language's own
    run. Runtimes that reserve large address space (JVM, Go) need the backend's per-language exemption,
    which only a run in their own language gets, so they are not graded this way (see ``_run_stdio``).
    """
    launcher = "exec " + shlex.join(job.lang.run_argv(job.code)) + "\n"
    return await session.run(launcher, language="bash", stdin=stdin, limits=job.limits)
