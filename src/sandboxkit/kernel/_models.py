"""``CellResult``: how one cell of a stateful Python kernel ended.

Like :class:`~sandboxkit.models.RunResult`, a cell's own failure (an exception, a timeout, a
kernel killed by what the cell did) is *data* in the result, never an exception: a policy
learning to use a code tool must see it. Losing the kernel's state is never silent either:
``state_lost`` says when variables defined by earlier cells are gone.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CellResult", "CellStatus"]


class CellStatus(str, Enum):
    """How a cell ended."""

    OK = "ok"  # ran to the end; ``value`` is the last expression's text (None when there is none)
    ERROR = "error"  # raised: ``error_name``, ``error_value`` and the user's ``traceback``; state kept
    TIMEOUT = "timeout"  # ran past its timeout; the kernel was killed and restarted (state lost)
    CRASHED = "crashed"  # the kernel died under the cell (os._exit, OOM kill, segfault); state lost


def bundle_text(bundle: dict[str, Any]) -> str:
    """A MIME bundle as a text reader sees it: its ``text/plain``, else a note naming what it held."""
    text = bundle.get("text/plain")
    if isinstance(text, str):
        return text
    return "[" + ", ".join(sorted(bundle)) + " output]"


class CellResult(BaseModel):
    """The outcome of one cell run by :meth:`Session.python <sandboxkit.session.Session.python>`.

    Attributes:
        status: how the cell ended (see :class:`CellStatus`).
        stdout: what the cell (and processes it started) wrote to stdout, cut to head + tail
            past ``Limits.output_bytes`` (see :mod:`sandboxkit.output`).
        stderr: the same for stderr.
        value: the text of the cell's value when it is not None, as a notebook shows it: its
            ``repr`` in plain Python, IPython's ``text/plain`` (pretty-printed) under IPython; None
            when a trailing ``;`` silences it (IPython).
        display: the cell's rich outputs in order, each a MIME bundle (``{"text/plain": ...,
            "text/html": ..., "image/png": base64}``) as Jupyter's ``display_data`` and
            ``execute_result`` carry them: ``display()`` calls (IPython) and the value. All of them
            together keep within ``Limits.output_bytes``; past that a bundle keeps only its cut
            ``text/plain`` (and ``truncated`` is set).
        error_name: the exception's class name (``"ZeroDivisionError"``), or what ended the kernel
            (``"TimeoutError"``, ``"KernelDied"``, ``"OutputLimitExceeded"``).
        error_value: the exception's message, or why the kernel ended.
        traceback: the user's traceback: frames of the cells (``File "<cell 3>"``) and what they
            called, never the kernel's own.
        truncated: some text above was cut to its head and tail.
        restarted: the cell ran in a new interpreter that replaced one which had run cells
            (after a timeout or crash, ``fresh=True``, or a kernel lost between calls).
        state_lost: variables defined by earlier cells are gone as of this result: set on the cell
            that timed out or crashed, and on a cell that found its kernel gone (the sandbox's
            commands killed it, a fork that could not carry process memory) and started a new one.
        duration_s: wall time of the cell inside the sandbox.
        shell: how the kernel ran the cell: ``"ipython"`` (IPython's ``InteractiveShell``: magics,
            ``!cmd``, ``display``, top-level ``await``) where the sandbox's Python has IPython,
            else ``"python"`` (plain ``exec``); None when the kernel did not say (it died first).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    status: CellStatus
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    display: list[dict[str, Any]] = Field(default_factory=list)
    error_name: str | None = None
    error_value: str | None = None
    traceback: str | None = None
    truncated: bool = False
    restarted: bool = False
    state_lost: bool = False
    duration_s: float = Field(0.0, ge=0)
    shell: Literal["ipython", "python"] | None = None

    @property
    def ok(self) -> bool:
        """True when the cell ran to the end without raising."""
        return self.status is CellStatus.OK

    def text(self) -> str:
        """What a notebook would show for the cell: stdout, stderr, then the value or the error."""
        parts = [self.stdout, self.stderr, *(bundle_text(b) for b in self.display)]
        if self.status is CellStatus.OK:
            if not self.display:  # the value is among the bundles when there are any
                parts.append(self.value or "")
        else:
            parts.append(self.traceback or f"{self.error_name}: {self.error_value}")
        return "".join(p if p.endswith("\n") or not p else p + "\n" for p in parts if p)
