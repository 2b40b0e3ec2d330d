"""Output and value comparison: each option, and the messages a log line shows."""

from __future__ import annotations

from sandboxkit.judge import CompareOptions, compare_stdout, compare_values


def test_default_ignores_trailing_whitespace_only() -> None:
    assert compare_stdout("1 2  \n3\n\n\n", "1 2\n3")[0]
    assert compare_stdout("a\r\nb\r\n", "a\nb\n")[0]
    matched, message = compare_stdout("1  2\n", "1 2\n")
    assert not matched and message == "line 1: expected '1 2', got '1  2'"
    assert not compare_stdout(" 1\n", "1\n")[0]  # leading whitespace counts


def test_exact_compares_byte_for_byte() -> None:
    exact = CompareOptions(whitespace="exact")
    assert compare_stdout("3\n", "3\n", exact)[0]
    matched, message = compare_stdout("3 \n", "3\n", exact)
    assert not matched and "char 1" in message


def test_all_whitespace_compares_tokens() -> None:
    loose = CompareOptions(whitespace="all")
    assert compare_stdout("1   2\n\n3 ", "1 2 3\n", loose)[0]
    assert compare_stdout("1 2 3 4", "1 2 3", loose) == (False, "expected 3 tokens, got 4")
    assert compare_stdout("1 5 3", "1 2 3", loose) == (False, "token 2: expected '2', got '5'")


def test_float_tolerance_absolute_and_relative() -> None:
    tol = CompareOptions(float_tol=1e-6)
    assert compare_stdout("0.3333333\n", "0.333333333\n", tol)[0]
    assert compare_stdout("1000000.5\n", "1000000.0\n", tol)[0]  # relative for large numbers
    assert not compare_stdout("0.334\n", "0.333\n", tol)[0]
    assert not compare_stdout("0.3333333\n", "0.333333333\n")[0]  # no tolerance by default
    assert compare_stdout("x 1.0000001 y", "x 1.0 y", CompareOptions(whitespace="all", float_tol=1e-6))[0]
    assert not compare_stdout("nan", "1.0", tol)[0]


def test_line_count_mismatch_names_the_extra_or_missing_line() -> None:
    assert compare_stdout("1\n2\n", "1\n") == (False, "expected 1 lines, got 2; extra line 2: '2'")
    assert compare_stdout("1\n", "1\n2\n") == (False, "expected 2 lines, got 1; missing line 2: '2'")


def test_case_insensitive() -> None:
    assert compare_stdout("YES\n", "yes\n", CompareOptions(case_sensitive=False))[0]
    assert not compare_stdout("YES\n", "yes\n")[0]


def test_values() -> None:
    assert compare_values([1, [2, 3]], [1, [2, 3]])[0]
    assert compare_values({"a": 1.0}, {"a": 1})[0]
    assert compare_values(0.1 + 0.2, 0.3, CompareOptions(float_tol=1e-9))[0]
    assert not compare_values(0.1 + 0.2, 0.3)[0]
    assert compare_values(True, 1)[0] is True  # Python equality, as the APPS grader uses
    assert compare_values([], [[]])[0] is False
    assert compare_values(3, [3], unwrap_expected=True)[0]
    assert not compare_values(3, [3])[0]
    assert compare_values(4, 3) == (False, "expected 3, got 4")
