"""SGLang / OpenAI-style tool calls: the ``code_interpreter`` schema, parsers and an executor.

Serving stacks hand tool calls back in two shapes: hermes-style text, where the model
writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen, SGLang's
``hermes`` parser, verl's default ``format``), and OpenAI ``tool_calls`` on an assistant
message. Both parse into :class:`ToolCall`; a call that cannot be parsed becomes a
:class:`ToolCallError`, which the executor answers with an error ``tool`` message, because a
model's malformed call is a training signal, not a crash.

:class:`CodeInterpreter` runs the calls in one session sandbox, so files persist from one
turn to the next, and returns ``{"role": "tool", ...}`` messages ready to append.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandboxkit.errors import SandboxError
from sandboxkit.integrations._format import format_error, format_result
from sandboxkit.integrations._runtime import GRACE_S, BackendLike, PoolHandle
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

#: The OpenAI function schema of the code tool (the same name and argument verl's old tool used).
CODE_INTERPRETER_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": (
            "Run a program in a sandbox and return what it printed (stdout, then stderr) and how it ended. "
            "Files written by one call are still there on the next call."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The complete program to run."}},
            "required": ["code"],
        },
    },
}

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: a function name and its arguments as a dict."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")


@dataclass(frozen=True)
class ToolCallError:
    """A call that could not be parsed; ``message`` is shown to the model."""

    message: str
    raw: str = ""
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")
    name: str = ""


def parse_tool_arguments(arguments: Any) -> dict[str, Any]:
    """Arguments given as a dict or a JSON object string, as a dict.

    Raises:
        ValueError: the arguments are neither (the message is meant for the model).
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
        if isinstance(parsed, dict):
            return parsed
        raise ValueError(f"the arguments must be a JSON object, got {type(parsed).__name__}")
    raise ValueError(f"the arguments must be a JSON object, got {type(arguments).__name__}")


def _call_from_mapping(data: Any, raw: str, call_id: str | None = None) -> ToolCall | ToolCallError:
    kwargs = {"id": call_id} if call_id else {}
    if not isinstance(data, Mapping):
        return ToolCallError(f"a tool call must be a JSON object with 'name' and 'arguments', got {raw!r:.200}", raw)
    inner = data.get("function")
    fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else data
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return ToolCallError("the tool call has no 'name'", raw, **kwargs)
    try:
        arguments = parse_tool_arguments(fn.get("arguments", fn.get("parameters")))
    except ValueError as exc:
        return ToolCallError(f"invalid arguments for {name!r}: {exc}", raw, name=name, **kwargs)
    return ToolCall(name, arguments, **kwargs)


def parse_hermes_tool_calls(text: str) -> tuple[str, list[ToolCall | ToolCallError]]:
    """Split hermes-style text into its plain content and its ``<tool_call>`` blocks.

    Returns:
        The text with the blocks removed (stripped), and one entry per block in order. An
        unclosed ``<tool_call>`` at the end becomes a :class:`ToolCallError`.
    """
    calls: list[ToolCall | ToolCallError] = []
    for match in _TOOL_CALL.finditer(text):
        raw = match.group(1).strip()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            calls.append(ToolCallError(f"the tool call is not valid JSON ({exc.msg} at position {exc.pos})", raw))
            continue
        calls.append(_call_from_mapping(data, raw))
    content = _TOOL_CALL.sub("", text)
    dangling = content.find("<tool_call>")
    if dangling != -1:
        raw = content[dangling + len("<tool_call>") :].strip()
        calls.append(ToolCallError("the tool call was not closed with </tool_call>", raw))
        content = content[:dangling]
    return content.strip(), calls


def parse_openai_tool_calls(message: Any) -> list[ToolCall | ToolCallError]:
    """Calls from an OpenAI assistant message (dict or SDK object) or a list of ``tool_calls``.

    Accepts ``{"tool_calls": [...]}``, a bare list of ``{"id", "type", "function": {"name",
    "arguments"}}``, SDK objects with the same attributes, and flat ``{"name", "arguments"}``.
    """
    if isinstance(message, Mapping):
        items: Any = message.get("tool_calls", [message] if "name" in message or "function" in message else [])
    elif isinstance(message, (list, tuple)):
        items = message
    else:
        items = getattr(message, "tool_calls", None) or []
    calls: list[ToolCall | ToolCallError] = []
    for item in items or []:
        if not isinstance(item, Mapping):
            fn = getattr(item, "function", None)
            item = {
                "id": getattr(item, "id", None),
                "function": {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None)},
            }
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        calls.append(_call_from_mapping(item, json.dumps(item, default=str)[:2000], call_id))
    return calls


class CodeInterpreter:
    """Executes ``code_interpreter`` calls in one session sandbox and answers with ``tool`` messages.

    One instance serves one conversation: files persist across turns until :meth:`close`.

    Args:
        backend: backend name, Backend instance or SyncSandboxPool (see :class:`PoolHandle`).
        language: language the code is run in.
        timeout: seconds each program may run.
        allow_language: accept a ``language`` argument from the model (otherwise ignored).
        allow_timeout: accept a ``timeout`` argument from the model, capped at ``max_timeout``.
        max_timeout: cap on a model-supplied timeout.
        max_output_chars: longest text returned to the model (head and tail kept).
        limits: other limits of the sandbox.
        deadline_s: wall-clock bound of one call, queue wait included.
        tool_name: the function name this executor answers to.
        pool_options: extra :class:`~sandboxkit.pool.SandboxPool` options.
    """

    def __init__(
        self,
        backend: BackendLike = "subprocess",
        *,
        language: str = "python",
        timeout: float = 10.0,
        allow_language: bool = False,
        allow_timeout: bool = False,
        max_timeout: float = 60.0,
        max_output_chars: int = 8000,
        limits: Limits | None = None,
        deadline_s: float = 120.0,
        tool_name: str = "code_interpreter",
        pool_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.language = resolve_language(language).name
        self.timeout = timeout
        self.allow_language = allow_language
        self.allow_timeout = allow_timeout
        self.max_timeout = max_timeout
        self.max_output_chars = max_output_chars
        self.limits = limits or Limits()
        self.deadline_s = deadline_s
        self.tool_name = tool_name
        self.handle = PoolHandle(backend, **dict(pool_options or {}))
        self._session: Session | None = None

    # --------------------------------------------------------------- helpers

    def _run_args(self, arguments: Mapping[str, Any]) -> tuple[str, float] | str:
        """(language, timeout) for a call, or an error text for the model."""
        language, timeout = self.language, self.timeout
        if self.allow_language and arguments.get("language"):
            try:
                language = resolve_language(str(arguments["language"])).name
            except SandboxError as exc:
                return f"Error: {exc.message}"
        if self.allow_timeout and arguments.get("timeout") is not None:
            try:
                timeout = min(float(arguments["timeout"]), self.max_timeout)
            except (TypeError, ValueError):
                return f"Error: timeout must be a number of seconds, got {arguments['timeout']!r}"
            if timeout <= 0:
                return f"Error: timeout must be positive, got {arguments['timeout']!r}"
        return language, timeout

    async def _session_run(self, pool: SandboxPool, code: str, language: str, timeout: float) -> RunResult:
        if self._session is None or self._session.closed:
            self._session = pool.session(limits=self.limits)
        return await self._session.run(code, language=language, timeout=timeout)

    def _message(self, call_id: str, name: str, content: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}

    def _check(self, call: ToolCall | ToolCallError) -> tuple[str, str, float] | str:
        if isinstance(call, ToolCallError):
            return f'Error: {call.message}. Call {self.tool_name} with a JSON object like {{"code": "print(1)"}}.'
        if call.name != self.tool_name:
            return f"Error: unknown tool {call.name!r}; the available tool is {self.tool_name!r}."
        code = call.arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return "Error: the 'code' argument is required and must be a non-empty string."
        checked = self._run_args(call.arguments)
        if isinstance(checked, str):
            return checked
        return code, checked[0], checked[1]

    def _outer_timeout(self, timeout: float) -> float:
        return max(self.deadline_s, timeout) + GRACE_S

    # --------------------------------------------------------------- public API

    async def execute(self, calls: Iterable[ToolCall | ToolCallError]) -> list[dict[str, Any]]:
        """Run each call in order in the session sandbox; one ``tool`` message per call. Never raises."""
        messages = []
        for call in calls:
            checked = self._check(call)
            if isinstance(checked, str):
                messages.append(self._message(call.id, call.name or self.tool_name, checked))
                continue
            code, language, timeout = checked
            try:
                result = await self.handle.acall(
                    functools.partial(self._session_run, code=code, language=language, timeout=timeout),
                    self._outer_timeout(timeout),
                )
                text = format_result(result, max_chars=self.max_output_chars)
            except Exception as exc:
                log.info("code_interpreter call failed: %s", exc)
                text = format_error(exc)
            messages.append(self._message(call.id, call.name, text))
        return messages

    def execute_sync(self, calls: Iterable[ToolCall | ToolCallError]) -> list[dict[str, Any]]:
        """Blocking twin of :meth:`execute`."""
        messages = []
        for call in calls:
            checked = self._check(call)
            if isinstance(checked, str):
                messages.append(self._message(call.id, call.name or self.tool_name, checked))
                continue
            code, language, timeout = checked
            try:
                result = self.handle.call(
                    functools.partial(self._session_run, code=code, language=language, timeout=timeout),
                    self._outer_timeout(timeout),
                )
                text = format_result(result, max_chars=self.max_output_chars)
            except Exception as exc:
                log.info("code_interpreter call failed: %s", exc)
                text = format_error(exc)
            messages.append(self._message(call.id, call.name, text))
        return messages

    async def respond(self, assistant: str | Mapping[str, Any] | Any) -> list[dict[str, Any]]:
        """Parse an assistant turn (hermes text, or a message with ``tool_calls``) and execute its calls."""
        return await self.execute(_calls_of(assistant))

    def respond_sync(self, assistant: str | Mapping[str, Any] | Any) -> list[dict[str, Any]]:
        """Blocking twin of :meth:`respond`."""
        return self.execute_sync(_calls_of(assistant))

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


def _calls_of(assistant: str | Mapping[str, Any] | Any) -> Sequence[ToolCall | ToolCallError]:
    if isinstance(assistant, str):
        return parse_hermes_tool_calls(assistant)[1]
    calls = parse_openai_tool_calls(assistant)
    if not calls:
        content = assistant.get("content") if isinstance(assistant, Mapping) else getattr(assistant, "content", None)
        if isinstance(content, str):
            return parse_hermes_tool_calls(content)[1]
    return calls
