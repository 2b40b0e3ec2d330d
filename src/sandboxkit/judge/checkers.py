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
**sandboxed**, like the solution, because they read the solution's output. A checker that does not
compile, crashes, fails (exit 3), or runs out of time says nothing about the solution: the verdict is
``infra_error`` with reward ``None`` (:class:`CheckerFailed`), never a silent pass or a 0.
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
        CheckerFailed: the checker did not compile, crashed, failed (exit 3) or ran out of a limit.
    """
    where = f"checker on case {case}"
    if result.status is Status.COMPILE_ERROR:
        text = (result.compile.stderr or result.compile.stdout) if result.compile else ""
        raise CheckerFailed(f"{where}: the checker does not compile: {_tail(text)}; fix the checker's code")
    if result.status in (Status.TIMEOUT, Status.MEMORY_EXCEEDED, Status.OUTPUT_LIMIT):
        raise CheckerFailed(f"{where}: the checker stopped ({result.status.value}); give it more room (timeout_s)")
    code = result.exit_code
    message = _tail(result.stderr) or _tail(result.stdout)
    if code == 0 or code == _POINTS:
        score = _score(result.stdout)
        score = 1.0 if score is None and code == 0 else (score or 0.0)
        return CheckOutcome(accepted=score >= 1.0, score=score, message=message)
    if code in _REJECT:
        return CheckOutcome(accepted=False, score=0.0, message=message or "rejected by the checker")
    why = f"exit code {code}" if code is not None else f"signal {result.signal}"
    failed = "reported its own failure" if code == _CHECKER_FAILED else "crashed"
    raise CheckerFailed(f"{where}: the checker {failed} ({why}): {message}; fix the checker")


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
import json as _json, sys as _sys
with open("checks.json", encoding="utf-8") as _f:
    _items = _json.load(_f)
for _i, (_in, _out, _ans) in enumerate(_items):
    try:
        _got = check(_in, _out, _ans)
        if isinstance(_got, bool) or _got is None:
            _res = {"score": 1.0 if _got else 0.0}
        else:
            _res = {"score": min(1.0, max(0.0, float(_got)))}
    except Exception as _e:
        _res = {"error": "%s: %s" % (type(_e).__name__, _e)}
    print(__MARK__ + _json.dumps(dict(_res, i=_i)), flush=True)
""".replace("__MARK__", repr(_MARK))


def python_request(checker: Checker, triples: list[tuple[str, str, str]], limits: Limits) -> RunRequest:
    """One run of a Python-function checker over every case (it reads ``checks.json``)."""
    return RunRequest(
        code=checker.code.rstrip("\n") + "\n\n" + _PYTHON_WRAPPER,
        language="python",
        files={"checks.json": json.dumps(triples).encode()},
        limits=limits.merged(timeout_s=checker.timeout_s * max(1, len(triples))),
    )


def read_python_result(result: RunResult, count: int) -> list[CheckOutcome]:
    """Scores of a Python-function checker run, one per case.

    Raises:
        CheckerFailed: the function raised, the run stopped or crashed, or a case has no answer.
    """
    found: dict[int, dict[str, Any]] = {}
    for line in result.stdout.splitlines():
        if line.startswith(_MARK):
            try:
                item = json.loads(line[len(_MARK) :])
            except json.JSONDecodeError:
                continue
            if isinstance(item, dict) and isinstance(item.get("i"), int):
                found[item["i"]] = item
    outcomes = []
    for i in range(count):
        item = found.get(i)
        if item is None:
            why = result.status.value if result.status is not Status.OK else "no answer"
            raise CheckerFailed(f"the Python checker stopped before case {i} ({why}): {_tail(result.stderr)}")
        if "error" in item:
            raise CheckerFailed(f"the Python checker raised on case {i}: {item['error']}; fix the checker")
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
        CheckerFailed: the checker could not judge a case (the whole verdict gets no reward).
        SandboxError: the sandbox running the checker failed.
    """
    indices = sorted(outputs)
    triples = []
    for i in indices:
        case = suite.cases[i]
        assert isinstance(case, StdioCase)
        triples.append((case.stdin, outputs[i], case.expected_stdout or ""))
    if checker.type == "python":
        result = await pool.run(python_request(checker, triples, limits))
        verdicts = read_python_result(result, len(triples))
    else:
        verdicts = await _run_program(pool, checker, limits, triples, indices)
    for i, verdict in zip(indices, verdicts, strict=True):
        message = "" if verdict.accepted else trim_message(verdict.message or "rejected by the checker")
        status = "passed" if verdict.accepted else "wrong_answer"
        cases[i] = cases[i].model_copy(update={"status": status, "score": verdict.score, "message": message})


async def _run_program(
    pool: SandboxPool, checker: Checker, limits: Limits, triples: list[tuple[str, str, str]], indices: list[int]
) -> list[CheckOutcome]:
    lang = resolve_language(checker.language)
    caps = pool.backend.capabilities
    if (
        lang.compile is not None
        and not lang.virtual_memory_hungry
        and len(triples) > 1
        and caps.stateful
        and "bash" in caps.languages
        and pool.max_sandboxes >= 2
    ):
        # Compile once: the first case's run builds the checker, the others run the binary it left.
        out = []
        async with pool.session() as session:
            first = await session.run(program_request(checker, *triples[0], limits))
            out.append(read_program_result(first, indices[0]))
            for index, triple in zip(indices[1:], triples[1:], strict=True):
                result = await session.run(compiled_request(checker, *triple, limits))
                out.append(read_program_result(result, index))
        return out
    results = await pool.run_many([program_request(checker, *t, limits) for t in triples])
    errors = [r for r in results if isinstance(r, SandboxkitError)]
    if errors:
        raise errors[0]
    return [read_program_result(r, i) for r, i in zip(results, indices, strict=True) if isinstance(r, RunResult)]
