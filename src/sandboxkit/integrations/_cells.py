"""The code tools' stateful mode (``stateful_python``): a call runs as a cell of the session's Python kernel.

verl's :class:`~sandboxkit.integrations.verl.SandboxTool`, SGLang's
:class:`~sandboxkit.integrations.sglang.CodeInterpreter` and the rLLM
:class:`~sandboxkit.integrations.rllm.SandboxEnv` share this: with ``stateful_python`` on, a
Python call no longer runs as a fresh program but as a cell of the trajectory's kernel, so a
function defined in one call is there in the next (ReTool-style tool-integrated reasoning).
The tool's schema does not change; only what the model sees in the answer does, worded the
same way as a program's answer:

* stdout, then stderr, then the cell's rich outputs as text (``display()`` calls and the last
  expression's value, as a notebook shows them: ``text/plain``, and a note such as
  ``[image/png output]`` for what has no text), or the traceback of the cell's exception (the
  user's frames only);
* a bracketed note when the cell timed out or the kernel died, and whenever earlier calls'
  variables are gone (``state_lost``), so the model knows to define them again.
"""

from __future__ import annotations

from typing import Any

from sandboxkit.integrations._format import truncate_middle
from sandboxkit.kernel import CellResult, CellStatus
from sandboxkit.kernel._models import bundle_text
from sandboxkit.session import Session

__all__ = ["cell_metrics", "format_cell", "run_cell"]

_LOST = "[the Python interpreter was restarted: variables and functions from earlier calls are gone]"


async def run_cell(session: Session, code: str, timeout_s: float) -> CellResult:
    """Run ``code`` as a cell of ``session``'s kernel (on the pool's loop)."""
    return await session.python(code, timeout_s=timeout_s)


def format_cell(result: CellResult, *, max_chars: int = 8000) -> str:
    """What the model reads for one cell: output, then the value or the error, then notes."""
    parts = [p for p in (result.stdout, result.stderr) if p]
    parts += [bundle_text(bundle) for bundle in result.display]
    if result.status is CellStatus.OK:
        if result.value is not None and not result.display:
            parts.append(result.value)
    elif result.status is CellStatus.ERROR:
        parts.append(result.traceback or f"{result.error_name}: {result.error_value}")
    elif result.status is CellStatus.TIMEOUT:
        parts.append("[stopped: the time limit was exceeded]")
    else:
        parts.append(f"[the Python interpreter died: {result.error_value}]")
    text = "".join(part if part.endswith("\n") else part + "\n" for part in parts).rstrip("\n")
    if result.state_lost:
        text = f"{text}\n{_LOST}" if text else _LOST
    return truncate_middle(text or "(no output)", max_chars)


def cell_metrics(result: CellResult) -> dict[str, Any]:
    """The per-call metrics a trainer logs (same keys as a program's, plus the kernel's flags)."""
    return {
        "status": result.status.value,
        "exit_code": None,
        "duration_s": result.duration_s,
        "state_lost": result.state_lost,
        "restarted": result.restarted,
    }
