"""Special judges: when "the output equals the expected output" is the wrong question.

About one competitive-programming problem in seven accepts more than one answer (any shortest path,
floats within a tolerance, any valid construction). A test suite names a **checker** for its stdio
cases (``{"cases": [...], "checker": ...}``, or ``checker=`` / a row's ``"checker"`` key):

* ``"tokens"``: outputs compared token by token (any whitespace between tokens);
* ``{"type": "float", "tol": 1e-6}``: token by token, numbers within ``tol`` (absolute below 1,
  relative above), other tokens exactly;
* ``{"type": "python", "code": "def check(input, output, answer): ..."}``: a Python function that
  returns ``True``/``False`` or a score in [0, 1];
* ``{"type": "program", "language": "cpp", "code": "..."}``: a program in any supported language with
  the testlib contract ``checker input.txt output.txt answer.txt``: exit code 0 accepts; 1 (wrong
  answer) or 2 (presentation error) rejects; a number printed first on stdout is the case's score
  (testlib's points, exit 0 or 7); exit code 3 is testlib's "the checker itself failed";
* ``{"type": "interactor", "language": "cpp", "code": "..."}``: an interactive problem; the program talks
  to the solution over pipes (see :mod:`sandboxkit.judge.interactive`).

The built-in ones run in the grader (they are plain comparisons). Python and program checkers run
**sandboxed**, like the solution, because they read the solution's output.

Who is to blame when a checker does not answer (testlib's convention: a checker must accept the
reference answer):

* it does not compile, or says it failed itself (testlib's exit 3, e.g. "the participant's answer is
  better than the jury's"): the judge's failure, ``infra_error`` with reward ``None``
  (:class:`CheckerFailed`);
* it raises, crashes, or runs out of time or memory **on the solution's output**: the checker is run
  again on the reference answer (``expected_stdout`` as the output). If it accepts that, the
  solution's output caused the failure and the case is a ``wrong_answer`` (a program must not be able
  to turn its 0 into ``None`` by printing garbage the checker chokes on); if it fails on the reference
  too, the checker is broken (``CheckerFailed``). A case without an expected output has no reference:
  the failure is the output's (``wrong_answer``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandboxkit.errors import InvalidRequest, SandboxError, SandboxkitError
from sandboxkit.judge.cases import CompareOptions, InvalidTests, StdioCase, TestSuite
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.languages import resolve_language
from sandboxkit.models import Limits, RunRequest, RunResult, Status
from sandboxkit.pool import SandboxPool

__all__ = [
    "ANSWER",
    "INPUT",
    "OUTPUT",
    "CheckOutcome",
    "Checker",
    "CheckerCrashed",
    "CheckerFailed",
    "apply_checker",
    "parse_checker",
]

INPUT, OUTPUT, ANSWER = "input.txt", "output.txt", "answer.txt"
_MARK = "@@sandboxkit-check@@ "
#: testlib's exit codes: 0 ok, 1 wrong answer, 2 presentation error, 3 the checker failed, 7 points.
_REJECT = {1, 2}
_CHECKER_FAILED = 3
_POINTS = 7


class CheckerFailed(SandboxError):
    """The checker could not judge (did not compile, crashed, failed, timed out): no reward either way."""

    kind = "checker_failed"


class CheckerCrashed(CheckerFailed):
    """The checker crashed or ran out of a limit on one case: its reference answer decides who is to blame."""


class Checker(BaseModel):
    """A special judge for stdio cases (see the module docstring).

    Attributes:
        type: ``tokens``, ``float``, ``python``, ``program`` or ``interactor``.
        tol: the float tolerance (``float``).
        language: the checker program's language (``program``, ``interactor``; ``python`` for a function).
        code: the checker's source (``python``: defines ``check(input, output, answer)``).
        timeout_s: time limit of one check.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["tokens", "float", "python", "program", "interactor"]
    tol: float = Field(1e-6, ge=0)
    language: str = "python"
    code: str = ""
    timeout_s: float = Field(10.0, gt=0)

    @property
    def sandboxed(self) -> bool:
        """Whether it runs in a sandbox (a Python function or a program) rather than in the grader."""
        return self.type in ("python", "program", "interactor")

    def compare_options(self, base: CompareOptions) -> CompareOptions:
        """The comparison a built-in checker stands for."""
        tol = self.tol if self.type == "float" else base.float_tol
        return base.model_copy(update={"whitespace": "all", "float_tol": tol})


def parse_checker(value: Any) -> Checker | None:
    """A :class:`Checker` from its name (``"tokens"``, ``"float"``), a dict, or ``None``.

    Raises:
        InvalidTests: an unknown checker, a program checker without code, or an unknown language.
    """
    if value is None or isinstance(value, Checker):
        return value
    if isinstance(value, str):
        if value not in ("tokens", "float"):
            raise InvalidTests(f"checker {value!r} is not 'tokens' or 'float'; give a dict for a program checker")
        return Checker(type=value)  # type: ignore[arg-type]
    if not isinstance(value, Mapping):
        raise InvalidTests(f"checker must be a name or a dict, got {type(value).__name__}")
    data = dict(value)
    data.setdefault("type", "program" if "language" in data and data["language"] != "python" else data.get("type"))
    try:
        checker = Checker.model_validate(data)
    except ValidationError as exc:
        msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
        raise InvalidTests(f"checker: {msgs}") from exc
    if checker.sandboxed and not checker.code.strip():
        raise InvalidTests(f"a {checker.type} checker needs its source in 'code'")
    if checker.type in ("program", "interactor"):
        try:
            resolve_language(checker.language)
        except InvalidRequest as exc:
            raise InvalidTests(f"checker: {exc}") from exc
    return checker


class CheckOutcome(BaseModel):
    """What a sandboxed checker said about one case."""

    model_config = ConfigDict(frozen=True)

    accepted: bool
    score: float
    message: str = ""


def _score(stdout: str) -> float | None:
    first = stdout.split(maxsplit=1)
    if not first:
        return None
    try:
        value = float(first[0])
    except ValueError:
        return None
    return min(1.0, max(0.0, value))


def read_program_result(result: RunResult, case: int) -> CheckOutcome:
    """The testlib-contract reading of one checker run.

    Raises:
        CheckerFailed: the checker did not compile or reported its own failure (exit 3).
        CheckerCrashed: the checker crashed, exited with a code outside testlib's, or ran out of a limit.
    """
    where = f"checker on case {case}"
    if result.status is Status.COMPILE_ERROR:
        text = (result.compile.stderr or result.compile.stdout) if result.compile else ""
        raise CheckerFailed(f"{where}: the checker does not compile: {_tail(text)}; fix the checker's code")
    if result.status in (Status.TIMEOUT, Status.MEMORY_EXCEEDED, Status.OUTPUT_LIMIT):
        raise CheckerCrashed(f"{where}: the checker stopped ({result.status.value}); give it more room (timeout_s)")
    code = result.exit_code
    message = _tail(result.stderr) or _tail(result.stdout)
    if code == 0 or code == _POINTS:
        score = _score(result.stdout)
        score = 1.0 if score is None and code == 0 else (score or 0.0)
        return CheckOutcome(accepted=score >= 1.0, score=score, message=message)
    if code in _REJECT:
        return CheckOutcome(accepted=False, score=0.0, message=message or "rejected by the checker")
    why = f"exit code {code}" if code is not None else f"signal {result.signal}"
    if code == _CHECKER_FAILED:
        raise CheckerFailed(f"{where}: the checker reported its own failure ({why}): {message}; fix the checker")
    raise CheckerCrashed(f"{where}: the checker crashed ({why}): {message}; fix the checker")


def program_request(checker: Checker, stdin: str, output: str, answer: str, limits: Limits) -> RunRequest:
    """The run of a program checker on one case, ``checker input.txt output.txt answer.txt``."""
    return RunRequest(
        code=checker.code,
        language=checker.language,
        files={INPUT: stdin.encode(), OUTPUT: output.encode(), ANSWER: answer.encode()},
        argv=[INPUT, OUTPUT, ANSWER],
        limits=limits.merged(timeout_s=checker.timeout_s),
    )


def compiled_request(checker: Checker, stdin: str, output: str, answer: str, limits: Limits) -> RunRequest:
    """A later case of a compiled checker in the same session: run the binary the first case built."""
    argv = resolve_language(checker.language).run_argv(checker.code, [INPUT, OUTPUT, ANSWER])
    return RunRequest(
        code="exec " + shlex.join(argv) + "\n",
        language="bash",
        files={INPUT: stdin.encode(), OUTPUT: output.encode(), ANSWER: answer.encode()},
        limits=limits.merged(timeout_s=checker.timeout_s),
    )


_PYTHON_WRAPPER = """
import json as _json, os as _os, sys as _sys

# Reports go to the original stdout; what check() prints goes to stderr, so a checker that prints the
# solution's output (which may hold forged report lines) cannot pose as a report.
_sys.stdout.flush()
_sk_report = _os.fdopen(_os.dup(1), "w")
_os.dup2(2, 1)
_sys.stdout = _sys.stderr


def _sk_score(got):
    if isinstance(got, bool) or got is None:
        return 1.0 if got else 0.0
    return min(1.0, max(0.0, float(got)))


with open("checks.json", encoding="utf-8") as _f:
    _items = _json.load(_f)
for _i, (_in, _out, _ans, _ref) in enumerate(_items):
    print(__MARK__ + _json.dumps({"begin": _i}), file=_sk_report, flush=True)  # a stop now stopped on this output
    try:
        _res = {"score": _sk_score(check(_in, _out, _ans))}
    except Exception as _e:
        _res = {"error": "%s: %s" % (type(_e).__name__, _e)}
        if _ref:  # testlib's convention: the checker must accept the reference answer
            try:
                _s = _sk_score(check(_in, _ans, _ans))
                if _s < 1.0:
                    _res["reference"] = "it does not accept the reference answer (score %g)" % _s
            except Exception as _e:
                _res["reference"] = "it raises on the reference answer too (%s: %s)" % (type(_e).__name__, _e)
    print(__MARK__ + _json.dumps(dict(_res, i=_i)), file=_sk_report, flush=True)
""".replace("__MARK__", repr(_MARK))

#: One check: the case's input, the output to judge, the reference answer, and whether that answer exists.
Check = tuple[str, str, str, bool]


def python_request(checker: Checker, checks: list[Check], limits: Limits) -> RunRequest:
    """One run of a Python-function checker over every check (it reads ``checks.json``)."""
    return RunRequest(
        code=checker.code.rstrip("\n") + "\n\n" + _PYTHON_WRAPPER,
        language="python",
        files={"checks.json": json.dumps(checks).encode()},
        limits=limits.merged(timeout_s=checker.timeout_s * max(1, len(checks))),
    )


def read_python_result(result: RunResult, indices: list[int]) -> list[CheckOutcome | CheckerCrashed]:
    """Scores of a Python-function checker run over the cases ``indices``, in order.

    The list is shorter when the run stopped: its last item is then the :class:`CheckerCrashed` of the
    case the checker was judging (the run's caller judges the rest in a new run).

    Raises:
        CheckerFailed: the checker raised on a case's output and fails on its reference answer too, or
            the run stopped before judging any case (its own code is broken).
    """
    found: dict[int, dict[str, Any]] = {}
    begun = -1
    for line in result.stdout.splitlines():
        if line.startswith(_MARK):
            try:
                item = json.loads(line[len(_MARK) :])
            except json.JSONDecodeError:
                continue
            if isinstance(item, dict) and isinstance(item.get("i"), int):
                found[item["i"]] = item
            elif isinstance(item, dict) and isinstance(item.get("begin"), int):
                begun = max(begun, item["begin"])
    outcomes: list[CheckOutcome | CheckerCrashed] = []
    for k, index in enumerate(indices):
        item = found.get(k)
        if item is None:
            why = result.status.value if result.status is not Status.OK else "no answer"
            stopped = f"the Python checker stopped on case {index} ({why}): {_tail(result.stderr)}"
            if k != begun:
                raise CheckerFailed(stopped.replace(f"on case {index}", f"before case {index}") + "; fix the checker")
            outcomes.append(CheckerCrashed(stopped))
            break
        if "error" in item:
            if "reference" in item:
                raise CheckerFailed(
                    f"the Python checker raised on case {index} ({item['error']}) and {item['reference']}; "
                    "fix the checker"
                )
            message = f"the checker raised on this output: {item['error']}"
            outcomes.append(CheckOutcome(accepted=False, score=0.0, message=message))
            continue
        score = float(item["score"])
        outcomes.append(CheckOutcome(accepted=score >= 1.0, score=score))
    return outcomes


def _tail(text: str, limit: int = 200) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


async def apply_checker(
    pool: SandboxPool,
    checker: Checker,
    limits: Limits,
    suite: TestSuite,
    cases: dict[int, CaseResult],
    outputs: Mapping[int, str],
) -> None:
    """Let a sandboxed checker judge every stdio case that ran cleanly; update ``cases`` in place.

    Raises:
        CheckerFailed: the checker could not judge a case, and not because of the solution's output
            (see the module docstring): the whole verdict gets no reward.
        SandboxError: the sandbox running the checker failed.
    """
    indices = sorted(outputs)
    checks: list[Check] = []
    for i in indices:
        case = suite.cases[i]
        assert isinstance(case, StdioCase)
        checks.append((case.stdin, outputs[i], case.expected_stdout or "", case.expected_stdout is not None))
    if checker.type == "python":
        verdicts = await _run_python(pool, checker, limits, checks, indices)
    else:
        verdicts = await _run_program(pool, checker, limits, checks, indices)
    for i, check, verdict in zip(indices, checks, verdicts, strict=True):
        if isinstance(verdict, CheckerCrashed):
            verdict = await _blame(pool, checker, limits, check, i, verdict)
        message = "" if verdict.accepted else trim_message(verdict.message or "rejected by the checker")
        status = "passed" if verdict.accepted else "wrong_answer"
        cases[i] = cases[i].model_copy(update={"status": status, "score": verdict.score, "message": message})


async def _run_python(
    pool: SandboxPool, checker: Checker, limits: Limits, checks: list[Check], indices: list[int]
) -> list[CheckOutcome | CheckerCrashed]:
    """Every check in one run; a run that stops on a case's output goes on in a new run after that case."""
    out: list[CheckOutcome | CheckerCrashed] = []
    while len(out) < len(checks):
        result = await pool.run(python_request(checker, checks[len(out) :], limits))
        out.extend(read_python_result(result, indices[len(out) :]))
    return out


async def _blame(
    pool: SandboxPool, checker: Checker, limits: Limits, check: Check, index: int, crash: CheckerCrashed
) -> CheckOutcome:
    """A checker that crashed on a case's output, run on its reference answer: who is to blame.

    Raises:
        CheckerFailed: the checker fails on the reference answer too (it is broken).
    """
    stdin, _, answer, has_reference = check
    failed = f"the checker failed on this output ({crash})"
    if not has_reference:
        return CheckOutcome(accepted=False, score=0.0, message=failed)
    reference: list[CheckOutcome | CheckerCrashed]
    try:
        if checker.type == "python":
            result = await pool.run(python_request(checker, [(stdin, answer, answer, False)], limits))
            reference = read_python_result(result, [index])
        else:
            result = await pool.run(program_request(checker, stdin, answer, answer, limits))
            reference = [read_program_result(result, index)]
    except CheckerFailed as exc:
        reference = [CheckerCrashed(str(exc))]
    if isinstance(reference[0], CheckOutcome) and reference[0].accepted:
        return CheckOutcome(accepted=False, score=0.0, message=failed + "; it accepts the reference answer")
    said = reference[0].message if isinstance(reference[0], CheckOutcome) else str(reference[0])
    raise CheckerFailed(f"{crash}; on the reference answer of case {index} it fails too ({said}); fix the checker")


async def _run_program(
    pool: SandboxPool, checker: Checker, limits: Limits, checks: list[Check], indices: list[int]
) -> list[CheckOutcome | CheckerCrashed]:
    lang = resolve_language(checker.language)
    caps = pool.backend.capabilities
    triples = [check[:3] for check in checks]
    if (
        lang.compile is not None
        and not lang.virtual_memory_hungry
        and len(triples) > 1
        and caps.stateful
        and "bash" in caps.languages
        and pool.max_sandboxes >= 2
    ):
        # Compile once: the first case's run builds the checker, the others run the binary it left.
        async with pool.session() as session:
            results = [await session.run(program_request(checker, *triples[0], limits))]
            _program_outcome(results[0], indices[0])  # a compile error fails them all at once
            for triple in triples[1:]:
                results.append(await session.run(compiled_request(checker, *triple, limits)))
    else:
        ran = await pool.run_many([program_request(checker, *t, limits) for t in triples])
        errors = [r for r in ran if isinstance(r, SandboxkitError)]
        if errors:
            raise errors[0]
        results = [r for r in ran if isinstance(r, RunResult)]
    return [_program_outcome(r, i) for r, i in zip(results, indices, strict=True)]


def _program_outcome(result: RunResult, index: int) -> CheckOutcome | CheckerCrashed:
    try:
        return read_program_result(result, index)
    except CheckerCrashed as exc:
        return exc
