"""Banned patterns: code that must not appear in a solution (``sorted(`` in a sorting task, ``import os``).

Syntax: a plain string is a case-sensitive substring; a string that starts with ``re:`` is a
Python regular expression searched in multi-line mode (``re:(?i)\\bimport\\s+os\\b``; put
``(?i)`` first for case-insensitive matching). The check runs on the *extracted* code, before
anything runs, so a banned program costs no sandbox time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sandboxkit.judge.cases import InvalidTests

__all__ = ["BannedPattern", "compile_patterns", "find_banned"]

REGEX_PREFIX = "re:"


@dataclass(frozen=True)
class BannedPattern:
    """One compiled pattern; ``text`` is how it was written."""

    text: str
    regex: re.Pattern[str] | None

    def search(self, code: str) -> int | None:
        """Offset of the first match, or ``None``."""
        if self.regex is not None:
            match = self.regex.search(code)
            return match.start() if match else None
        found = code.find(self.text)
        return found if found >= 0 else None


def compile_patterns(patterns: Sequence[str] | str | None) -> list[BannedPattern]:
    """Compile patterns written in the syntax above.

    Raises:
        InvalidTests: a pattern is not a string, is empty, or is an invalid regular expression.
    """
    if patterns is None:
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    compiled = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidTests(f"banned pattern {pattern!r} must be a non-empty string")
        if pattern.startswith(REGEX_PREFIX):
            try:
                compiled.append(BannedPattern(pattern, re.compile(pattern[len(REGEX_PREFIX) :], re.MULTILINE)))
            except re.error as exc:
                raise InvalidTests(f"banned pattern {pattern!r} is not a valid regular expression: {exc}") from exc
        else:
            compiled.append(BannedPattern(pattern, None))
    return compiled


def find_banned(code: str, patterns: Sequence[BannedPattern]) -> str | None:
    """A message naming the first banned pattern found in ``code`` and its line, or ``None``."""
    for pattern in patterns:
        at = pattern.search(code)
        if at is not None:
            line = code.count("\n", 0, at) + 1
            return f"banned pattern {pattern.text!r} found on line {line}"
    return None
