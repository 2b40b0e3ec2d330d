"""Turning run results and infrastructure errors into text a model can act on.

Tool adapters (verl, SGLang, rLLM) hand a program's outcome back to the model as text. The
old SandboxFusionTool answered "no stdout here" for compile errors, timeouts and outages
alike; here each outcome says what happened, so the model can fix its own mistakes and is
told plainly when the sandbox, not its code, failed.
"""

from __future__ import annotations

from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.models import ExecResult, RunResult, Status

__all__ = ["format_error", "format_result", "truncate_middle"]

_NOTES = {
    Status.TIMEOUT: "[stopped: the time limit was exceeded]",
    Status.MEMORY_EXCEEDED: "[stopped: the memory limit was exceeded]",
    Status.OUTPUT_LIMIT: "[stopped: the output limit was exceeded; output truncated]",
}


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail of ``text`` (errors are usually at the end) within ``max_chars``."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    marker = f"\n...[{len(text) - max_chars} characters truncated]...\n"
    keep = max(max_chars - len(marker), 2)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]


def format_result(result: ExecResult, *, max_chars: int = 8000) -> str:
    """What the program printed, followed by a bracketed note when it did not end cleanly."""
    if isinstance(result, RunResult) and result.status is Status.COMPILE_ERROR and result.compile is not None:
        compiler = (result.compile.stdout + result.compile.stderr).rstrip()
        return truncate_middle(f"Compilation failed:\n{compiler}" if compiler else "Compilation failed.", max_chars)
    parts = [p for p in (result.stdout, result.stderr) if p]
    text = "".join(part if part.endswith("\n") else part + "\n" for part in parts).rstrip("\n")
    note = _NOTES.get(result.status)
    if note is None and result.status is Status.FAILED:
        if result.exit_code is not None:
            note = f"[exit code {result.exit_code}]"
        elif result.signal is not None:
            note = f"[killed by signal {result.signal}]"
        else:
            note = "[the program failed]"
    if note:
        text = f"{text}\n{note}" if text else note
    return truncate_middle(text or "(no output)", max_chars)


def format_error(exc: BaseException) -> str:
    """Error text for a call that produced no result, worded so the model does not blame its code."""
    if isinstance(exc, InvalidRequest):
        return f"Error: the request was rejected: {exc.message}"
    if isinstance(exc, SandboxError):
        kind = exc.kind.replace("_", " ")
        return f"Error: the code sandbox failed ({kind}); your code was not judged. Details: {exc.message}"
    return f"Error: the tool failed unexpectedly ({type(exc).__name__}: {exc})"
