"""SGLang / OpenAI tool calls: parsing both shapes, and a session executor on the subprocess backend."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from sandboxkit.integrations.sglang import (
    CODE_INTERPRETER_SCHEMA,
    CodeInterpreter,
    ToolCall,
    ToolCallError,
    parse_hermes_tool_calls,
    parse_openai_tool_calls,
)


def test_schema_is_an_openai_function() -> None:
    fn = CODE_INTERPRETER_SCHEMA["function"]
    assert CODE_INTERPRETER_SCHEMA["type"] == "function"
    assert fn["name"] == "code_interpreter"
    assert fn["parameters"]["required"] == ["code"]
    json.dumps(CODE_INTERPRETER_SCHEMA)  # serialisable as-is for a chat template


def test_hermes_text_with_two_calls_and_content() -> None:
    text = (
        "Let me check.\n"
        '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n</tool_call>\n'
        '<tool_call>{"name": "code_interpreter", "arguments": "{\\"code\\": \\"print(2)\\"}"}</tool_call>'
    )
    content, calls = parse_hermes_tool_calls(text)
    assert content == "Let me check."
    assert [c.arguments for c in calls if isinstance(c, ToolCall)] == [{"code": "print(1)"}, {"code": "print(2)"}]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no 'name'"),
        ('<tool_call>{"name": "code_interpreter", "arguments": "[1]"}</tool_call>', "JSON object"),
        ('<tool_call>{"name": "code_interpreter", "arguments": {"code": "x"}}', "not closed"),
    ],
)
def test_malformed_hermes_calls_become_errors(text: str, fragment: str) -> None:
    _, calls = parse_hermes_tool_calls(text)
    assert len(calls) == 1
    assert isinstance(calls[0], ToolCallError)
    assert fragment in calls[0].message


def test_openai_tool_calls_from_dicts_and_sdk_objects() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "code_interpreter", "arguments": '{"code": "1"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "code_interpreter", "arguments": "{oops"}},
        ],
    }
    calls = parse_openai_tool_calls(message)
    assert isinstance(calls[0], ToolCall) and calls[0].id == "call_a" and calls[0].arguments == {"code": "1"}
    assert isinstance(calls[1], ToolCallError) and calls[1].id == "call_b"
    sdk = SimpleNamespace(tool_calls=[SimpleNamespace(id="c1", function=SimpleNamespace(name="f", arguments="{}"))])
    (parsed,) = parse_openai_tool_calls(sdk)
    assert isinstance(parsed, ToolCall) and parsed.name == "f" and parsed.id == "c1"


def test_executor_keeps_files_between_turns_and_answers_bad_calls() -> None:
    with CodeInterpreter("subprocess", timeout_s=10) as tool:
        first = tool.respond_sync(
            '<tool_call>{"name": "code_interpreter", "arguments": '
            "{\"code\": \"open('notes.txt', 'w').write('kept')\\nprint('wrote')\"}}</tool_call>"
        )
        assert first[0]["role"] == "tool" and first[0]["name"] == "code_interpreter"
        assert first[0]["content"].strip() == "wrote"
        second = tool.respond_sync(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c2",
                        "function": {
                            "name": "code_interpreter",
                            "arguments": {"code": "print(open('notes.txt').read())"},
                        },
                    },
                    {"id": "c3", "function": {"name": "code_interpreter", "arguments": "{broken"}},
                    {"id": "c4", "function": {"name": "rm_rf", "arguments": {}}},
                    {"id": "c5", "function": {"name": "code_interpreter", "arguments": {"code": "1/0"}}},
                ],
            }
        )
        assert [m["tool_call_id"] for m in second] == ["c2", "c3", "c4", "c5"]
        assert second[0]["content"].strip() == "kept"
        assert second[1]["content"].startswith("Error:") and "JSON" in second[1]["content"]
        assert "unknown tool 'rm_rf'" in second[2]["content"]
        assert "ZeroDivisionError" in second[3]["content"] and "[exit code 1]" in second[3]["content"]


async def test_async_executor_ignores_model_timeout_unless_allowed() -> None:
    tool = CodeInterpreter("subprocess", timeout_s=1.0)
    try:
        msgs = await tool.execute(
            [ToolCall("code_interpreter", {"code": "import time; time.sleep(3); print('late')", "timeout": 30})]
        )
        assert "time limit" in msgs[0]["content"] and "late" not in msgs[0]["content"]
    finally:
        tool.close()


def test_backend_down_gives_error_text(down_backend) -> None:
    with CodeInterpreter(down_backend, timeout_s=5) as tool:
        (msg,) = tool.execute_sync([ToolCall("code_interpreter", {"code": "print(1)"})])
    assert msg["role"] == "tool"
    assert msg["content"].startswith("Error: the code sandbox failed")


def test_stateful_python_keeps_definitions_between_turns() -> None:
    with CodeInterpreter("subprocess", timeout_s=5, stateful_python=True) as tool:
        call = '<tool_call>{{"name": "code_interpreter", "arguments": {{"code": {code}}}}}</tool_call>'
        first = tool.respond_sync(call.format(code='"def area(r):\\n    return 3 * r * r\\nsizes = [1]"'))
        assert first[0]["content"] == "(no output)"
        second = tool.respond_sync(call.format(code='"sizes.append(area(2))\\nsizes"'))
        assert second[0]["content"] == "[1, 12]"
        third = tool.respond_sync(call.format(code='"area(sizes[-1]) / 0"'))
        assert "ZeroDivisionError" in third[0]["content"] and "<cell " in third[0]["content"]
        assert tool.respond_sync(call.format(code='"len(sizes)"'))[0]["content"] == "2"
