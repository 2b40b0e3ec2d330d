"""Compare a program's output (or a function's return value) with the expected one.

Each comparison returns ``(matched, message)``: the message is a one-line, short description
of the first difference, fit for a log line and for the verdict's per-case ``message``.
"""

from __future__ import annotations

import math
from typing import Any

from sandboxkit.judge.cases import CompareOptions

__all__ = ["compare_stdout", "compare_values", "short"]

MESSAGE_CHARS = 200


def short(value: Any, limit: int = 60) -> str:
    """``repr`` of a value, cut to ``limit`` characters with an ellipsis."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _tokens_match(got: str, want: str, tol: float | None) -> bool:
    if got == want:
        return True
    if tol is None:
        return False
    a, b = _number(got), _number(want)
    if a is None or b is None:
        return False
    return _floats_match(a, b, tol)


def _floats_match(a: float, b: float, tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol * max(1.0, abs(b))


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare_stdout(actual: str, expected: str, options: CompareOptions | None = None) -> tuple[bool, str]:
    """Compare program output with the expected output under ``options`` (see :class:`CompareOptions`)."""
    opts = options or CompareOptions()
    if not opts.case_sensitive:
        actual, expected = actual.lower(), expected.lower()
    if opts.whitespace == "exact" and opts.float_tol is None:
        if actual == expected:
            return True, ""
        at = next(
            (i for i, (x, y) in enumerate(zip(actual, expected, strict=False)) if x != y),
            min(len(actual), len(expected)),
        )
        return False, (
            f"output differs at char {at}: expected {short(expected[at : at + 30])}, got {short(actual[at : at + 30])}"
        )[:MESSAGE_CHARS]
    if opts.whitespace == "all":
        got, want = actual.split(), expected.split()
        for i, (g, w) in enumerate(zip(got, want, strict=False)):
            if not _tokens_match(g, w, opts.float_tol):
                return False, f"token {i + 1}: expected {short(w)}, got {short(g)}"[:MESSAGE_CHARS]
        if len(got) != len(want):
            return False, f"expected {len(want)} tokens, got {len(got)}"
        return True, ""
    got_lines, want_lines = (
        (_lines(actual), _lines(expected))
        if opts.whitespace == "trailing"
        else (actual.split("\n"), expected.split("\n"))
    )
    for i, (g, w) in enumerate(zip(got_lines, want_lines, strict=False)):
        if g == w:
            continue
        if opts.float_tol is not None:
            gt, wt = g.split(), w.split()
            if len(gt) == len(wt) and all(_tokens_match(x, y, opts.float_tol) for x, y in zip(gt, wt, strict=False)):
                continue
        return False, f"line {i + 1}: expected {short(w)}, got {short(g)}"[:MESSAGE_CHARS]
    if len(got_lines) != len(want_lines):
        extra = (
            f"extra line {len(want_lines) + 1}: {short(got_lines[len(want_lines)])}"
            if len(got_lines) > len(want_lines)
            else f"missing line {len(got_lines) + 1}: {short(want_lines[len(got_lines)])}"
        )
        return False, f"expected {len(want_lines)} lines, got {len(got_lines)}; {extra}"[:MESSAGE_CHARS]
    return True, ""


def _values_equal(got: Any, want: Any, tol: float | None) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):
        return bool(got == want)
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        if tol is not None:
            return _floats_match(float(got), float(want), tol)
        return bool(got == want)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_values_equal(g, w, tol) for g, w in zip(got, want, strict=False))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_values_equal(got[k], want[k], tol) for k in want)
    try:
        return bool(got == want)
    except Exception:  # exotic __eq__: treat as different
        return False


def compare_values(
    got: Any, want: Any, options: CompareOptions | None = None, *, unwrap_expected: bool = False
) -> tuple[bool, str]:
    """Compare a return value (already JSON-normalised: tuples are lists) with the expected value.

    With ``unwrap_expected``, a value equal to ``want[0]`` also matches when ``want`` is a
    non-empty list (APPS wraps call-based outputs that way).
    """
    opts = options or CompareOptions()
    tol = opts.float_tol
    if not opts.case_sensitive and isinstance(got, str) and isinstance(want, str):
        got, want = got.lower(), want.lower()
    if _values_equal(got, want, tol):
        return True, ""
    if unwrap_expected and isinstance(want, list) and want and _values_equal(got, want[0], tol):
        return True, ""
    return False, f"expected {short(want)}, got {short(got)}"[:MESSAGE_CHARS]
