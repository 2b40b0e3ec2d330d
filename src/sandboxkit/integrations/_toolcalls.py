"""Tool-call parsing, once for every adapter: hermes ``<tool_call>`` text, OpenAI ``tool_calls``, agent actions.

Serving stacks hand tool calls back in two shapes: hermes-style text, where the model
writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen, SGLang's
``hermes`` parser, verl's default ``format``), and OpenAI ``tool_calls`` on an assistant
message (dicts or SDK objects). Agent frameworks add a third: an action object (rLLM's
``Action``, LLM-in-Sandbox's ``Action(function_name, parameters)``). All of them parse
into :class:`ToolCall`; anything that cannot be parsed becomes a :class:`ToolCallError`
whose message is meant for the model, because a model's malformed call is a training
signal, never a crash. No function here raises on any input.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ToolCall",
    "ToolCallError",
    "call_from_mapping",
    "calls_in_action",
    "calls_in_message",
    "parse_hermes_tool_calls",
    "parse_openai_tool_calls",
    "parse_tool_arguments",
]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_TOOL_CALL = re.compile(re.escape(_OPEN) + r"(.*?)" + re.escape(_CLOSE), re.DOTALL)
_RAW_CHARS = 2000  # how much of a malformed call is kept for logs


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: a function name and its arguments as a dict."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=_new_id)


@dataclass(frozen=True)
class ToolCallError:
    """A call that could not be parsed; ``message`` is shown to the model."""

    message: str
    raw: str = ""
    id: str = field(default_factory=_new_id)
    name: str = ""


def parse_tool_arguments(arguments: Any) -> dict[str, Any]:
    """Arguments given as a dict or a JSON object string, as a dict (``None`` / ``""``: no arguments).

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
        except RecursionError:
            raise ValueError("the arguments are nested too deeply") from None
        if isinstance(parsed, dict):
            return parsed
        raise ValueError(f"the arguments must be a JSON object, got {type(parsed).__name__}")
    raise ValueError(f"the arguments must be a JSON object, got {type(arguments).__name__}")


def call_from_mapping(data: Any, raw: str, call_id: str | None = None) -> ToolCall | ToolCallError:
    """A call from ``{"name", "arguments"}`` (or ``"parameters"``), optionally nested under ``"function"``."""
    ids = {"id": call_id} if call_id else {}
    if not isinstance(data, Mapping):
        return ToolCallError(
            f"a tool call must be a JSON object with 'name' and 'arguments', got {raw!r:.200}", raw, **ids
        )
    inner = data.get("function")
    fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else data
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return ToolCallError("the tool call has no 'name'", raw, **ids)
    try:
        arguments = parse_tool_arguments(fn.get("arguments", fn.get("parameters")))
    except ValueError as exc:
        return ToolCallError(f"invalid arguments for {name!r}: {exc}", raw, name=name, **ids)
    return ToolCall(name, arguments, **ids)


def _json_call(raw: str) -> ToolCall | ToolCallError:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCallError(f"the tool call is not valid JSON ({exc.msg} at position {exc.pos})", raw)
    except RecursionError:
        return ToolCallError("the tool call is nested too deeply", raw[:_RAW_CHARS])
    return call_from_mapping(data, raw)


def parse_hermes_tool_calls(text: str) -> tuple[str, list[ToolCall | ToolCallError]]:
    """Split hermes-style text into its plain content and its ``<tool_call>`` blocks.

    Returns:
        The text with the blocks removed (stripped), and one entry per block in order. An
        unclosed ``<tool_call>`` at the end becomes a :class:`ToolCallError` (and is removed
        from the content).
    """
    calls: list[ToolCall | ToolCallError] = [_json_call(m.group(1).strip()) for m in _TOOL_CALL.finditer(text)]
    content = _TOOL_CALL.sub("", text)
    dangling = content.find(_OPEN)
    if dangling != -1:
        raw = content[dangling + len(_OPEN) :].strip()
        calls.append(ToolCallError(f"the tool call was not closed with {_CLOSE}", raw[:_RAW_CHARS]))
        content = content[:dangling]
    return content.strip(), calls


def parse_openai_tool_calls(message: Any) -> list[ToolCall | ToolCallError]:
    """Calls from an OpenAI assistant message (dict or SDK object) or a list of ``tool_calls``.

    Accepts ``{"tool_calls": [...]}``, a bare list of ``{"id", "type", "function": {"name",
    "arguments"}}``, SDK objects with the same attributes, and flat ``{"name", "arguments"}``.
    """
    if isinstance(message, Mapping):
        flat = "name" in message or "function" in message
        items: Any = message.get("tool_calls", [message] if flat else [])
    elif isinstance(message, (list, tuple)):
        items = message
    else:
        items = getattr(message, "tool_calls", None)
    if items is None:  # OpenAI sends "tool_calls": null on a turn without calls
        return []
    if not isinstance(items, (list, tuple)):
        return [ToolCallError(f"'tool_calls' must be a list, got {type(items).__name__}", repr(items)[:_RAW_CHARS])]
    calls: list[ToolCall | ToolCallError] = []
    for item in items:
        if not isinstance(item, Mapping):
            fn = getattr(item, "function", None)
            item = {
                "id": getattr(item, "id", None),
                "function": {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None)},
            }
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        calls.append(call_from_mapping(item, json.dumps(item, default=str)[:_RAW_CHARS], call_id))
    return calls


def calls_in_message(assistant: Any) -> list[ToolCall | ToolCallError]:
    """The calls of an assistant turn: hermes text, or a message with ``tool_calls`` (else hermes in its content)."""
    if isinstance(assistant, str):
        return parse_hermes_tool_calls(assistant)[1]
    calls = parse_openai_tool_calls(assistant)
    if not calls:
        content = assistant.get("content") if isinstance(assistant, Mapping) else getattr(assistant, "content", None)
        if isinstance(content, str):
            return parse_hermes_tool_calls(content)[1]
    return calls


def calls_in_action(action: Any) -> list[ToolCall | ToolCallError]:
    """Whatever an agent hands to an environment's ``step``, as calls (``[]``: the turn made no call).

    Accepts ``None``, hermes text, a JSON object string, a message with ``tool_calls``, a flat
    ``{"name", "arguments"}`` mapping, lists of those, rLLM's ``Action`` (its ``.action``), and
    objects with ``function_name`` / ``name`` and ``parameters`` / ``arguments``.
    """
    if action is None:
        return []
    if hasattr(action, "action") and not isinstance(action, (Mapping, str, list, tuple)):
        return calls_in_action(action.action)  # rLLM's Action dataclass
    if isinstance(action, (list, tuple)):
        return [c for item in action for c in calls_in_action(item)]
    if isinstance(action, str):
        stripped = action.strip()
        if stripped.startswith("{"):
            try:
                return calls_in_action(json.loads(stripped))
            except json.JSONDecodeError as exc:
                return [ToolCallError(f"the action is not valid JSON ({exc.msg} at position {exc.pos})", action)]
            except RecursionError:
                return [ToolCallError("the action is nested too deeply", action[:_RAW_CHARS])]
        return parse_hermes_tool_calls(action)[1]
    if isinstance(action, Mapping):
        if "tool_calls" in action:
            return parse_openai_tool_calls(action)
        return [call_from_mapping(action, json.dumps(action, default=str)[:_RAW_CHARS])]
    name = getattr(action, "function_name", None) or getattr(action, "name", None)
    if not name and (hasattr(action, "function_name") or hasattr(action, "name")):
        return []  # llm-in-sandbox's Action with an empty function name: the turn made no call
    if isinstance(name, str):  # llm-in-sandbox's Action(function_name, parameters) and similar objects
        params = getattr(action, "parameters", None)
        if params is None:
            params = getattr(action, "arguments", None)
        return [call_from_mapping({"name": name, "arguments": params}, repr(action)[:_RAW_CHARS])]
    return [ToolCallError(f"unsupported action of type {type(action).__name__}", repr(action)[:_RAW_CHARS])]
