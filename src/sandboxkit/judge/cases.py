"""Test cases: three typed shapes, and a parser that also accepts the datasets' own shapes as-is.

The native shapes (one JSON object per case)::

    {"type": "stdio",  "stdin": "1 2\\n", "expected_stdout": "3\\n"}
    {"type": "assert", "code": "assert add(1, 2) == 3"}          # run after the solution; passes if it exits cleanly
    {"type": "call",   "fn_name": "add", "args": [1, 2], "expected": 3}

``tests`` may be a list of those, or a suite ``{"cases": [...], "compare": {...}, "fn_name"?}``.
Accepted as they come from the datasets (as a dict or as a JSON string):

* verl / APPS / CodeContests / TACO ground truth: ``{"inputs": [...], "outputs": [...]}`` (stdin/stdout),
  the same with ``"fn_name"`` (call-based; each input is JSON lines of positional arguments, or a list of
  arguments; an output may wrap the return value in a one-element list, as APPS does), and
  ``{"assert_case": ["assert ...", ...]}``.
* Sandbox Fusion ``provided_data`` test lists: ``{"test": [{"input": {"stdin": ...}, "output": {"stdout": ...}}]}``
  or the bare list.

Anything else raises :class:`InvalidTests` with a message that names the case and the field,
so a broken dataset row is reported, not silently scored 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "AssertCase",
    "CallCase",
    "CompareOptions",
    "InvalidTests",
    "StdioCase",
    "TestCase",
    "TestSuite",
    "parse_compare",
    "parse_tests",
]

_MODEL = ConfigDict(frozen=True, extra="forbid")


class InvalidTests(ValueError):
    """The tests of a row cannot be understood. The row gets an ``invalid`` verdict; the batch goes on."""


class CompareOptions(BaseModel):
    """How program output is compared with the expected output.

    Attributes:
        whitespace: ``exact`` (byte for byte), ``trailing`` (default: trailing spaces on each line and
            trailing blank lines are ignored), or ``all`` (any run of whitespace, including newlines,
            is one separator: the outputs are compared token by token).
        float_tol: when set, two tokens that both parse as numbers match if they differ by at most
            ``float_tol`` absolutely or relatively (``|a-b| <= tol * max(1, |b|)``); also applies to
            numbers inside ``call`` return values.
        case_sensitive: ``False`` compares case-insensitively (as Sandbox Fusion's judge does).
    """

    model_config = _MODEL

    whitespace: Literal["exact", "trailing", "all"] = "trailing"
    float_tol: float | None = Field(None, ge=0)
    case_sensitive: bool = True


class StdioCase(BaseModel):
    """Feed ``stdin`` to the program; compare its stdout with ``expected_stdout`` (``None``: exit 0 passes)."""

    model_config = _MODEL

    type: Literal["stdio"] = "stdio"
    stdin: str = ""
    expected_stdout: str | None = None


class AssertCase(BaseModel):
    """Run ``code`` after the solution (``check(candidate)``, ``assert f(2) == 4``); passes if it exits cleanly."""

    model_config = _MODEL

    type: Literal["assert"] = "assert"
    code: str


class CallCase(BaseModel):  # type: ignore[no-redef]  # the pydantic mypy plugin's __init__ also has **kwargs
    """Call ``fn_name(*args, **kwargs)`` (a function, or a method of ``Solution()``); compare with ``expected``.

    ``unwrap_expected`` accepts a return value equal to ``expected[0]`` too: APPS call-based
    outputs wrap the value in a one-element list, and the verl/APPS graders accept both.
    """

    model_config = _MODEL

    type: Literal["call"] = "call"
    fn_name: str = Field(min_length=1)
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    expected: Any
    unwrap_expected: bool = False


TestCase = Annotated[StdioCase | AssertCase | CallCase, Field(discriminator="type")]


class TestSuite(BaseModel):
    """The parsed tests of one problem.

    Attributes:
        cases: the cases, in order.
        compare: comparison options the tests asked for (``None``: the grader's default).
        shape: which input shape they came from (``sandboxkit``, ``verl``, ``verl_call``, ``verl_assert``,
            ``sandbox_fusion``), for logs.
        checker: the suite's special judge as given (a name or a dict; the grader parses it with
            :func:`sandboxkit.judge.checkers.parse_checker`), or ``None``.
    """

    __test__ = False  # not a pytest test class
    model_config = _MODEL

    cases: list[TestCase]
    compare: CompareOptions | None = None
    shape: str = "sandboxkit"
    checker: str | dict[str, Any] | None = None


_TYPES = ("stdio", "assert", "call")


def parse_compare(value: CompareOptions | Mapping[str, Any] | str | None) -> CompareOptions | None:
    """Comparison options from a model, a dict, or a short string (``exact``, ``trailing``, ``all``).

    Raises:
        InvalidTests: the value is not one of those.
    """
    if value is None or isinstance(value, CompareOptions):
        return value
    if isinstance(value, str):
        if value not in ("exact", "trailing", "all"):
            raise InvalidTests(f"compare {value!r} is not one of 'exact', 'trailing', 'all' (or use a dict)")
        return CompareOptions(whitespace=value)  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        try:
            return CompareOptions.model_validate(dict(value))
        except ValidationError as exc:
            raise InvalidTests(f"compare: {_errors(exc)}") from exc
    raise InvalidTests(f"compare must be a dict or a string, got {type(value).__name__}")


def parse_tests(tests: Any) -> TestSuite:
    """Parse ``tests`` in any accepted shape (see the module docstring).

    Raises:
        InvalidTests: missing, malformed, empty, or of an unknown shape/type; the message says what to fix.
    """
    if isinstance(tests, TestSuite):
        return tests
    if tests is None:
        raise InvalidTests("no tests given: the row needs a 'tests' field")
    if isinstance(tests, (str, bytes)):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as exc:
            raise InvalidTests(f"tests is a string but not valid JSON ({exc.msg} at char {exc.pos})") from exc
        except UnicodeDecodeError as exc:
            raise InvalidTests(f"tests are bytes but not UTF-8 ({exc.reason})") from exc
    if isinstance(tests, BaseModel):
        return _suite([tests], None, "sandboxkit")
    if isinstance(tests, Mapping):
        suite = _parse_mapping(tests)
    elif isinstance(tests, Sequence):
        suite = _parse_list(list(tests))
    else:
        raise InvalidTests(f"tests must be a list or a dict (or their JSON), got {type(tests).__name__}")
    if not suite.cases:
        raise InvalidTests("tests contain no test cases")
    return suite


def _parse_mapping(data: Mapping[str, Any]) -> TestSuite:
    if "cases" in data:
        cases = _list_field(data, "cases", "a list")
        fn_name = data.get("fn_name")
        items = [_with_default_fn(c, fn_name) for c in cases]
        checker = data.get("checker")
        if checker is not None and not isinstance(checker, (str, dict)):
            raise InvalidTests(f"checker must be a name or a dict, got {type(checker).__name__}")
        cases_ = [_parse_case(c, i) for i, c in enumerate(items)]
        return TestSuite(cases=cases_, compare=parse_compare(data.get("compare")), shape="sandboxkit", checker=checker)
    if isinstance(data.get("assert_case"), list):
        codes = data["assert_case"]
        cases = []
        for i, code in enumerate(codes):
            if not isinstance(code, str):
                raise InvalidTests(f"assert_case[{i}] must be a string of test code, got {type(code).__name__}")
            cases.append(AssertCase(code=code))
        return _suite(cases, None, "verl_assert")
    if "inputs" in data or "outputs" in data:
        return _parse_verl(data)
    if "test" in data:
        items = _list_field(data, "test", "a list of {'input', 'output'} items")
        return _suite([_parse_case(c, i) for i, c in enumerate(items)], None, "sandbox_fusion")
    if "type" in data or "stdin" in data or "fn_name" in data or "code" in data:
        return _suite([_parse_case(data, 0)], None, "sandboxkit")
    raise InvalidTests(
        "tests dict has none of the accepted shapes: {'cases': [...]}, {'inputs', 'outputs', 'fn_name'?}, "
        f"{{'assert_case': [...]}}, {{'test': [...]}} (got keys {sorted(map(str, data))!r})"
    )


def _parse_list(items: list[Any]) -> TestSuite:
    cases = [_parse_case(item, i) for i, item in enumerate(items)]
    shape = "sandbox_fusion" if items and all(isinstance(i, Mapping) and "input" in i for i in items) else "sandboxkit"
    return _suite(cases, None, shape)


def _suite(cases: list[Any], compare: CompareOptions | None, shape: str) -> TestSuite:
    return TestSuite(cases=cases, compare=compare, shape=shape)


def _with_default_fn(case: Any, fn_name: Any) -> Any:
    if (
        fn_name
        and isinstance(case, Mapping)
        and case.get("type", "call") == "call"
        and "fn_name" not in case
        and ("args" in case or "expected" in case)
    ):
        return {**case, "type": "call", "fn_name": fn_name}
    return case


def _parse_case(item: Any, index: int) -> StdioCase | AssertCase | CallCase:
    if isinstance(item, (StdioCase, AssertCase, CallCase)):
        return item
    if not isinstance(item, Mapping):
        raise InvalidTests(f"case {index}: must be an object, got {type(item).__name__} {str(item)[:40]!r}")
    data = dict(item)
    if "input" in data and "output" in data and "type" not in data:
        return _sandbox_fusion_case(data, index)
    kind = data.get("type")
    if kind is None:
        kind = "call" if "fn_name" in data else "assert" if "code" in data else "stdio"
        data["type"] = kind
    if kind not in _TYPES:
        raise InvalidTests(f"case {index}: unknown test type {kind!r}; use one of {', '.join(map(repr, _TYPES))}")
    models: dict[str, type[StdioCase] | type[AssertCase] | type[CallCase]] = {
        "stdio": StdioCase,
        "assert": AssertCase,
        "call": CallCase,
    }
    try:
        return models[kind].model_validate(data)
    except ValidationError as exc:
        raise InvalidTests(f"case {index} ({kind}): {_errors(exc)}") from exc


def _sandbox_fusion_case(data: Mapping[str, Any], index: int) -> StdioCase:
    given, want = data.get("input"), data.get("output")
    stdin = given.get("stdin", "") if isinstance(given, Mapping) else given
    stdout = want.get("stdout") if isinstance(want, Mapping) else want
    if not isinstance(stdin, str) or not (stdout is None or isinstance(stdout, str)):
        raise InvalidTests(
            f"case {index}: Sandbox Fusion test items need input.stdin and output.stdout strings, "
            f"got input={str(given)[:40]!r} output={str(want)[:40]!r}"
        )
    return StdioCase(stdin=stdin, expected_stdout=stdout)


def _parse_verl(data: Mapping[str, Any]) -> TestSuite:
    inputs, outputs = data.get("inputs"), data.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise InvalidTests("verl/APPS tests need 'inputs' and 'outputs' lists")
    if len(inputs) != len(outputs):
        raise InvalidTests(f"verl/APPS tests have {len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = data.get("fn_name")
    if fn_name:
        if not isinstance(fn_name, str):
            raise InvalidTests(f"fn_name must be a string, got {fn_name!r}")
        cases: list[Any] = [
            CallCase(fn_name=fn_name, args=_call_args(given, i), expected=_call_expected(want), unwrap_expected=True)
            for i, (given, want) in enumerate(zip(inputs, outputs, strict=True))
        ]
        return _suite(cases, None, "verl_call")
    stdio = [
        StdioCase(
            stdin=_lines(given, i, "inputs"), expected_stdout=None if want is None else _lines(want, i, "outputs")
        )
        for i, (given, want) in enumerate(zip(inputs, outputs, strict=True))
    ]
    return _suite(stdio, None, "verl")


def _lines(value: Any, index: int, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise InvalidTests(f"{field}[{index}] must be a string (or a list of lines), got {type(value).__name__}")


def _call_args(value: Any, index: int) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        # verl's call format: one JSON value per line, one line per positional argument.
        lines = [line for line in value.split("\n") if line.strip()]
        try:
            return [json.loads(line) for line in lines]
        except json.JSONDecodeError as exc:
            raise InvalidTests(f"inputs[{index}]: call arguments must be JSON, one per line ({exc.msg})") from exc
    return [value]


def _call_expected(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _list_field(data: Mapping[str, Any], field: str, what: str) -> list[Any]:
    """``data[field]``, a list or the JSON text of one (datasets store nested columns as strings)."""
    value = data[field]
    if isinstance(value, str):
        value = _json_field(value, field)
    if not isinstance(value, list):
        raise InvalidTests(f"'{field}' must be {what}, got {type(value).__name__}")
    return value


def _json_field(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidTests(f"'{field}' is a string but not valid JSON ({exc.msg})") from exc


def _errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "value"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
