"""Property tests: output comparison matches what it should and rejects what it should.

A comparison that says "different" for equal outputs scores a correct program 0; one that says
"equal" for different outputs rewards a wrong one. Both are checked on open-ended inputs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from sandboxkit.judge.cases import CompareOptions
from sandboxkit.judge.compare import MESSAGE_CHARS, compare_stdout, compare_values

options = st.builds(
    CompareOptions,
    whitespace=st.sampled_from(["exact", "trailing", "all"]),
    float_tol=st.none() | st.floats(0, 1e-3),
    case_sensitive=st.booleans(),
)
#: Printable program output: words, numbers, spaces and newlines.
token = st.text(st.characters(codec="ascii", categories=["L", "N", "P"]), min_size=1, max_size=8)
output_lines = st.lists(st.lists(token, min_size=0, max_size=5).map(" ".join), max_size=6)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10,
)


@given(st.text(max_size=200), options)
def test_an_output_always_matches_itself(text: str, opts: CompareOptions) -> None:
    assert compare_stdout(text, text, opts) == (True, "")


@given(output_lines, st.text(" \t", max_size=3), st.integers(0, 3))
def test_trailing_mode_ignores_trailing_blanks(lines: list[str], pad: str, blank: int) -> None:
    expected = "\n".join(lines) + "\n"
    actual = "\n".join(line + pad for line in lines) + "\n" * (blank + 1)
    assert compare_stdout(actual, expected, CompareOptions(whitespace="trailing"))[0]


@given(st.lists(token, max_size=12), st.lists(st.sampled_from([" ", "\n", "\t", "  "]), min_size=12, max_size=12))
def test_all_mode_ignores_how_tokens_are_spaced(tokens: list[str], seps: list[str]) -> None:
    spaced = "".join(tok + sep for tok, sep in zip(tokens, seps, strict=False))
    assert compare_stdout(spaced, " ".join(tokens), CompareOptions(whitespace="all"))[0]


@given(st.lists(token, max_size=10), st.lists(token, max_size=10), options)
def test_different_tokens_never_match_without_tolerance(got: list[str], want: list[str], opts: CompareOptions) -> None:
    opts = opts.model_copy(update={"float_tol": None})
    fold = (lambda s: s) if opts.case_sensitive else str.lower
    assume([fold(t) for t in got] != [fold(t) for t in want])
    matched, message = compare_stdout(" ".join(got), " ".join(want), opts)
    assert not matched
    assert message and len(message) <= MESSAGE_CHARS and "\n" not in message


@given(st.floats(-1e6, 1e6), st.floats(1e-9, 1e-3), st.floats(0, 0.99))
def test_numbers_within_tolerance_match_and_beyond_do_not(want: float, tol: float, share: float) -> None:
    scale = tol * max(1.0, abs(want))
    near, far = want + share * scale, want + 2.5 * scale
    opts = CompareOptions(float_tol=tol)
    assert compare_stdout(repr(near), repr(want), opts)[0]
    assert compare_values(near, want, opts)[0]
    assume(abs(far - want) > scale)  # float rounding can erase the step for huge values
    assert not compare_stdout(repr(far), repr(want), opts)[0]
    assert not compare_values(far, want, opts)[0]


@given(json_value, options)
def test_a_value_always_matches_itself(value: Any, opts: CompareOptions) -> None:
    assert compare_values(value, value, opts)[0]


@given(json_value, json_value)
def test_different_values_do_not_match_exactly(got: Any, want: Any) -> None:
    assume(got != want)
    assume(not (isinstance(got, bool) or isinstance(want, bool)))  # True == 1 in Python; bools compare by ==
    matched, message = compare_values(got, want, CompareOptions())
    assert not matched
    assert 0 < len(message) <= MESSAGE_CHARS


@given(st.lists(token, min_size=1, max_size=8), st.sampled_from(["exact", "trailing", "all"]))
def test_case_matters_exactly_when_asked(tokens: list[str], whitespace: str) -> None:
    want = " ".join(tokens)
    got = want.swapcase()
    assume(got != want)
    sensitive = CompareOptions(whitespace=whitespace, case_sensitive=True)  # type: ignore[arg-type]
    assert not compare_stdout(got, want, sensitive)[0]
    assert compare_stdout(got, want, sensitive.model_copy(update={"case_sensitive": False}))[0]
