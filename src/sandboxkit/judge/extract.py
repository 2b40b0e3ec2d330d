"""Find the program inside a model's completion.

A completion is prose around code, usually in Markdown fences, often cut off by the
token limit, sometimes a chat transcript. The rules, in order (the first that yields
code wins, and its name is recorded so a dataset's extraction failures can be counted):

1. ``fenced``: the last *closed* fenced block tagged with the wanted language
   (aliases count: ```` ```py ````, ```` ```c++ ````, ```` ```js ````...);
2. ``unterminated``: a trailing fence of the wanted language that was never closed
   (the completion hit its length limit mid-block);
3. ``fenced_any``: the last closed block without a tag, else the last closed block
   with any tag;
4. ``unterminated``: a trailing unclosed fence with no or another tag;
5. ``raw``: the whole text, when it has no fence at all;
6. ``empty``: nothing left (an empty completion, or only fences with nothing inside).

Reasoning traces are dropped first: ``<think>...</think>`` blocks, and everything up to
a lone ``</think>`` (chat templates often put the opening tag in the prompt), because
models sketch wrong code while thinking and the answer comes after.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sandboxkit.errors import InvalidRequest
from sandboxkit.languages import resolve_language

__all__ = ["Extraction", "completion_text", "extract_code"]

# An opening fence: 3+ backticks (or tildes) at the start of a line, then an optional info
# string. The body runs to the next fence of the same kind, or to the end (unterminated).
_OPEN = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_END = re.compile(r"</think>", re.IGNORECASE)


@dataclass(frozen=True)
class Extraction:
    """The code found in a completion and how it was found.

    Attributes:
        code: the program text (may be empty).
        method: ``fenced``, ``unterminated``, ``fenced_any``, ``raw`` or ``empty``.
    """

    code: str
    method: str


@dataclass(frozen=True)
class _Block:
    tag: str | None  # canonical language of the info string, or None when untagged/unknown
    tagged: bool
    body: str
    closed: bool


def completion_text(completion: str | Sequence[Mapping[str, Any]] | Mapping[str, Any] | None) -> str:
    """The text to search for code: a string as is; for a chat transcript, the last assistant turn.

    A message's ``content`` may be a string or a list of parts (``{"type": "text", "text": ...}``);
    text parts are joined. A transcript without an assistant turn yields ``""``.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):  # a single message
        return _content_text(completion.get("content"))
    for message in reversed(list(completion)):
        if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def _strip_reasoning(text: str) -> str:
    text = _THINK_BLOCK.sub("", text)
    closing = list(_THINK_END.finditer(text))
    if closing:  # an opening tag that lived in the prompt: keep only what follows the last close
        text = text[closing[-1].end() :]
    return text


def _tag_language(info: str) -> tuple[str | None, bool]:
    word = info.strip().split()[0] if info.strip() else ""
    word = word.strip("{}.").lower()
    if not word:
        return None, False
    try:
        return resolve_language(word).name, True
    except InvalidRequest:
        return None, True


def _blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    pos = 0
    while True:
        match = _OPEN.search(text, pos)
        if match is None:
            return blocks
        fence = match.group("fence")
        tag, tagged = _tag_language(match.group("info"))
        body_start = match.end() + 1
        # The closing fence: same character, at least as long, alone on its line; or, as many
        # completions do, glued to the end of the last code line ("return x```").
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$|{re.escape(fence)}", re.MULTILINE)
        end = close.search(text, body_start) if body_start <= len(text) else None
        if end is None:
            blocks.append(_Block(tag, tagged, text[body_start:], closed=False))
            return blocks
        blocks.append(_Block(tag, tagged, text[body_start : end.start()], closed=True))
        pos = end.end()


def extract_code(
    completion: str | Sequence[Mapping[str, Any]] | Mapping[str, Any] | None, language: str = "python"
) -> Extraction:
    """Extract the program for ``language`` from a completion (see the module docstring for the rules).

    Never raises for odd input: an empty or code-free completion gives ``method="empty"``
    (or ``raw``), which the grader turns into a ``no_code`` verdict.

    Raises:
        InvalidRequest: ``language`` is not a known language.
    """
    wanted = resolve_language(language).name
    text = _strip_reasoning(completion_text(completion))
    blocks = _blocks(text)
    candidates = (
        ("fenced", [b for b in blocks if b.closed and b.tag == wanted]),
        ("unterminated", [b for b in blocks if not b.closed and b.tag == wanted]),
        ("fenced_any", [b for b in blocks if b.closed and not b.tagged] or [b for b in blocks if b.closed]),
        ("unterminated", [b for b in blocks if not b.closed]),
    )
    for method, found in candidates:
        for block in reversed(found):
            if block.body.strip():
                return Extraction(_dedent_fence_body(block.body), method)
    if blocks:  # fences, but all empty: there is no program
        return Extraction("", "empty")
    code = text.strip("\n")
    return Extraction(code, "raw") if code.strip() else Extraction("", "empty")


def _dedent_fence_body(body: str) -> str:
    # Fences indented inside a list item indent their body too; remove the common indent.
    return textwrap.dedent(body).strip("\n") + "\n"
