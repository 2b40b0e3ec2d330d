"""SGLang / OpenAI-style tool calls: the ``code_interpreter`` schema, parsers and an executor.

The parsers (hermes ``<tool_call>`` text and OpenAI ``tool_calls``) live in
:mod:`sandboxkit.integrations._toolcalls` and are re-exported here; a call that cannot be
parsed becomes a :class:`ToolCallError`, which the executor answers with an error ``tool``
message, because a model's malformed call is a training signal, not a crash.

:class:`CodeInterpreter` runs the calls in one session sandbox, so files persist from one
turn to the next, and returns ``{"role": "tool", ...}`` messages ready to append. How a call
is checked and answered is the shared code tool (:mod:`sandboxkit.integrations._codetool`),
so verl's ``SandboxTool`` answers the model the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sandboxkit._request import renamed
from sandboxkit.integrations._cells import run_cell
from sandboxkit.integrations._codetool import CODE_INTERPRETER_SCHEMA, CodeRequest, CodeToolBase
from sandboxkit.integrations._runtime import BackendLike, PoolHandle, run_blocking
from sandboxkit.integrations._toolcalls import (
    ToolCall,
    ToolCallError,
    calls_in_message,
    parse_hermes_tool_calls,
    parse_openai_tool_calls,
    parse_tool_arguments,
)
from sandboxkit.kernel import CellResult
from sandboxkit.languages import resolve_language
from sandboxkit.models import Limits, RunResult
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = [
    "CODE_INTERPRETER_SCHEMA",
    "CodeInterpreter",
    "ToolCall",
    "ToolCallError",
    "parse_hermes_tool_calls",
    "parse_openai_tool_calls",
    "parse_tool_arguments",
]

log = logging.getLogger(__name__)


class CodeInterpreter(CodeToolBase):
    """Executes ``code_interpreter`` calls in one session sandbox and answers with ``tool`` messages.

    One instance serves one conversation: files persist across turns until :meth:`close`.

    Args:
        backend: backend name or config, Backend instance or SyncSandboxPool (see :class:`PoolHandle`).
        language: language the code is run in.
        timeout_s: seconds each program may run.
        allow_language: accept a ``language`` argument from the model (otherwise ignored).
        allow_timeout: accept a ``timeout`` argument from the model, clamped to ``max_timeout_s``
            (the answer says so).
        max_timeout_s: upper bound of a model-supplied timeout, in seconds.
        max_output_chars: longest text returned to the model (head and tail kept).
        limits: other limits of the sandbox.
        deadline_s: wall-clock bound of one call, queue wait included.
        tool_name: the function name this executor answers to.
        stateful_python: run Python calls as cells of the conversation's persistent interpreter
            (what one call defines, the next can use; see ``docs/kernels.md``).
        pool_options: extra :class:`~sandboxkit.pool.SandboxPool` options (``backend_options`` included).
        timeout, max_timeout: the deprecated old names of ``timeout_s`` / ``max_timeout_s``.

    Raises:
        InvalidRequest: an unknown language, or a backend option the backend's config refuses.
    """

    def __init__(
        self,
        backend: BackendLike = "subprocess",
        *,
        language: str = "python",
        timeout_s: float | None = None,
        allow_language: bool = False,
        allow_timeout: bool = False,
        max_timeout_s: float | None = None,
        max_output_chars: int = 8000,
        limits: Limits | None = None,
        deadline_s: float = 120.0,
        tool_name: str = "code_interpreter",
        stateful_python: bool = False,
        pool_options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        max_timeout: float | None = None,
    ) -> None:
        self.language = resolve_language(language).name
        timeout_s = renamed(timeout_s, timeout, "timeout", where="CodeInterpreter")
        max_timeout_s = renamed(max_timeout_s, max_timeout, "max_timeout", where="CodeInterpreter")
        self.timeout_s = 10.0 if timeout_s is None else timeout_s
        self.allow_language = allow_language
        self.allow_timeout = allow_timeout
        self.max_timeout_s = 60.0 if max_timeout_s is None else max_timeout_s
        self.max_output_chars = max_output_chars
        self.limits = limits or Limits()
        self.deadline_s = deadline_s
        self.tool_name = tool_name
        self.stateful_python = stateful_python
        self.handle = PoolHandle(backend, **dict(pool_options or {}))
        self._session: Session | None = None

    async def _session_run(self, pool: SandboxPool, request: CodeRequest) -> RunResult | CellResult:
        """On the pool's loop: run in this conversation's session (opened on first use)."""
        if self._session is None or self._session.closed:
            self._session = pool.session(limits=self.limits)
        if self.stateful_python and request.language == "python":
            return await run_cell(self._session, request.code, request.timeout_s)
        return await self._session.run(request.code, language=request.language, timeout_s=request.timeout_s)

    async def execute(self, calls: Iterable[ToolCall | ToolCallError]) -> list[dict[str, Any]]:
        """Run each call in order in the session sandbox; one ``tool`` message per call. Never raises."""
        messages = []
        for call in calls:
            checked = self.check_call(call)
            if isinstance(checked, str):
                text, name = checked, call.name or self.tool_name
            else:
                text, _ = await self.run_request(checked, self._session_run)
                name = call.name
            messages.append({"role": "tool", "tool_call_id": call.id, "name": name, "content": text})
        return messages

    def execute_sync(self, calls: Iterable[ToolCall | ToolCallError]) -> list[dict[str, Any]]:
        """Blocking form of :meth:`execute` (runs it)."""
        return run_blocking(self.execute(list(calls)))

    async def respond(self, assistant: str | Mapping[str, Any] | Any) -> list[dict[str, Any]]:
        """Parse an assistant turn (hermes text, or a message with ``tool_calls``) and execute its calls."""
        return await self.execute(calls_in_message(assistant))

    def respond_sync(self, assistant: str | Mapping[str, Any] | Any) -> list[dict[str, Any]]:
        """Blocking form of :meth:`respond` (runs it)."""
        return run_blocking(self.respond(assistant))

    def close(self) -> None:
        """Release the session sandbox and the pool this executor created. Idempotent."""
        session, self._session = self._session, None
        if session is not None and self.handle.created:
            try:
                self.handle.call(lambda _p: session.close(), self.deadline_s)
            except Exception:
                log.warning("closing the code_interpreter session failed", exc_info=True)
        self.handle.close()

    def __enter__(self) -> CodeInterpreter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
