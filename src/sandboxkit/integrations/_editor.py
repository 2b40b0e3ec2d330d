"""The text side of ``str_replace_editor`` (view / create / str_replace / insert).

File bytes travel through the backend's file API (``read_files`` / ``write_files``), never
through ``echo`` in a shell, so contents round-trip exactly whatever their size, quoting or
line endings. This module holds only the pure text operations; each returns the new text
and the message for the model, or raises :class:`EditError` with a message the model can
act on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["EditError", "insert", "number_lines", "str_replace", "view"]

SNIPPET_LINES = 4


class EditError(ValueError):
    """An edit the model asked for cannot be done; the message says why and what to do."""


def number_lines(text: str, start: int = 1) -> str:
    """Lines prefixed with their 1-based number, like ``cat -n``."""
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), start))


def _as_range(view_range: Any, n_lines: int) -> tuple[int, int]:
    if not isinstance(view_range, Sequence) or isinstance(view_range, str) or len(view_range) != 2:
        raise EditError("view_range must be a list of two integers [start, end] (end -1 means the last line)")
    try:
        start, end = int(view_range[0]), int(view_range[1])
    except (TypeError, ValueError):
        raise EditError(f"view_range must hold integers, got {list(view_range)!r}") from None
    if end == -1:
        end = n_lines
    if not 1 <= start <= n_lines or end < start or end > n_lines:
        raise EditError(f"view_range {list(view_range)!r} is out of bounds; the file has {n_lines} lines")
    return start, end


def view(text: str, path: str, view_range: Any = None) -> str:
    """The file with line numbers, optionally limited to ``view_range``."""
    lines = text.split("\n")
    if view_range is None:
        return f"Here's the result of running `cat -n` on {path}:\n{number_lines(text)}"
    start, end = _as_range(view_range, len(lines))
    return f"Here's the result of running `cat -n` on {path}:\n" + number_lines(
        "\n".join(lines[start - 1 : end]), start
    )


def _snippet(text: str, line: int, n_new: int) -> str:
    lines = text.split("\n")
    first = max(line - SNIPPET_LINES, 0)
    last = min(line + n_new + SNIPPET_LINES, len(lines))
    return number_lines("\n".join(lines[first:last]), first + 1)


def str_replace(text: str, path: str, old_str: Any, new_str: Any) -> tuple[str, str]:
    """Replace the single occurrence of ``old_str`` with ``new_str``.

    Raises:
        EditError: ``old_str`` is missing, absent from the file, or not unique.
    """
    if not isinstance(old_str, str) or old_str == "":
        raise EditError("old_str is required for str_replace and must be a non-empty string")
    new = "" if new_str is None else new_str
    if not isinstance(new, str):
        raise EditError("new_str must be a string")
    count = text.count(old_str)
    if count == 0:
        raise EditError(f"No replacement was performed: old_str did not appear verbatim in {path}.")
    if count > 1:
        lines = sorted({text[:i].count("\n") + 1 for i in _find_all(text, old_str)})
        raise EditError(
            f"No replacement was performed: old_str appears {count} times in {path} (lines {lines}); "
            "include more context to make it unique."
        )
    at = text.index(old_str)
    updated = text[:at] + new + text[at + len(old_str) :]
    line = text[:at].count("\n")
    message = (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
        f"{_snippet(updated, line, new.count(chr(10)) + 1)}\nReview the changes and make sure they are as expected."
    )
    return updated, message


def insert(text: str, path: str, insert_line: Any, new_str: Any) -> tuple[str, str]:
    """Insert ``new_str`` after line ``insert_line`` (0 inserts at the top).

    Raises:
        EditError: the line number or the text is missing or invalid.
    """
    if not isinstance(new_str, str):
        raise EditError("new_str is required for insert and must be a string")
    try:
        at = int(insert_line)
    except (TypeError, ValueError):
        raise EditError(f"insert_line must be an integer, got {insert_line!r}") from None
    lines = text.split("\n") if text else []
    if text.endswith("\n"):
        lines = lines[:-1]
    if not 0 <= at <= len(lines):
        raise EditError(f"insert_line {at} is out of bounds; the file has {len(lines)} lines (use 0 to {len(lines)})")
    new_lines = new_str.split("\n")
    if new_str.endswith("\n"):
        new_lines = new_lines[:-1]
    merged = lines[:at] + new_lines + lines[at:]
    updated = "\n".join(merged) + ("\n" if text.endswith("\n") or not text else "")
    message = (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n"
        f"{_snippet(updated, at, len(new_lines))}\nReview the changes and make sure they are as expected."
    )
    return updated, message


def _find_all(text: str, sub: str) -> list[int]:
    found, start = [], 0
    while (i := text.find(sub, start)) != -1:
        found.append(i)
        start = i + 1
    return found
