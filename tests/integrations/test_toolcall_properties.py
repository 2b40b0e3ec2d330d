"""Property tests of tool-call parsing: whatever a model writes, the parsers answer, never raise, and round-trip."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandboxkit.integrations._toolcalls import (
    ToolCall,
    ToolCallError,
    calls_in_action,
    calls_in_message,
    parse_hermes_tool_calls,
    parse_openai_tool_calls,
    parse_tool_arguments,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
arguments = st.dictionaries(st.text(max_size=12), json_values, max_size=5)
# Prose around the calls; it may itself contain fragments of the tags.
prose = st.text(max_size=80) | st.sampled_from(["", "<tool_call", "</tool_call>", "tool_call>", "<tool_call>"])


def hermes(name: str, args: dict[str, Any], *, string_args: bool) -> str:
    payload = {"name": name, "arguments": json.dumps(args) if string_args else args}
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


@SETTINGS
@given(
    calls=st.lists(st.tuples(names, arguments, st.booleans()), max_size=4),
    before=st.text(max_size=60).filter(lambda t: "<tool_call>" not in t and "</tool_call>" not in t),
)
def test_hermes_round_trip(calls: list[tuple[str, dict[str, Any], bool]], before: str) -> None:
    text = before + "".join(hermes(n, a, string_args=s) for n, a, s in calls)
    content, parsed = parse_hermes_tool_calls(text)
    assert content == before.strip()
    assert [(c.name, c.arguments) for c in parsed if isinstance(c, ToolCall)] == [(n, a) for n, a, _ in calls]
    assert len(parsed) == len(calls)


@SETTINGS
@given(st.text(max_size=300) | st.lists(prose, max_size=6).map("".join))
def test_hermes_never_raises_and_leaves_no_tag_in_the_content(text: str) -> None:
    content, parsed = parse_hermes_tool_calls(text)
    assert "<tool_call>" not in content
    assert all(isinstance(c, (ToolCall, ToolCallError)) for c in parsed)
    if text.count("<tool_call>") > text.count("</tool_call>"):  # an unclosed call is reported, not dropped
        assert any(isinstance(c, ToolCallError) for c in parsed)
    for call in parsed:
        if isinstance(call, ToolCallError):
            assert call.message and call.id.startswith("call_")


@SETTINGS
@given(calls=st.lists(st.tuples(st.text(min_size=1, max_size=8), names, arguments), max_size=4))
def test_openai_tool_calls_keep_ids_order_and_arguments(calls: list[tuple[str, str, dict[str, Any]]]) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ],
    }
    parsed = parse_openai_tool_calls(message)
    assert [(c.id, c.name, c.arguments) for c in parsed if isinstance(c, ToolCall)] == calls
    assert calls_in_message(message) == parsed
    assert calls_in_action(message) == parsed


@SETTINGS
@given(json_values | st.text(max_size=50) | st.binary(max_size=20))
def test_arguments_are_a_dict_or_a_value_error(value: Any) -> None:
    try:
        parsed = parse_tool_arguments(value)
    except ValueError as exc:
        assert str(exc)  # a message for the model
    else:
        assert isinstance(parsed, dict)
        if isinstance(value, dict):
            assert parsed == value


@SETTINGS
@given(json_values | st.text(max_size=100) | st.lists(st.text(max_size=30), max_size=3))
def test_any_action_becomes_calls_or_errors(action: Any) -> None:
    parsed = calls_in_action(action)
    assert all(isinstance(c, (ToolCall, ToolCallError)) for c in parsed)
    if action is None or action == [] or action == "":
        assert parsed == []
