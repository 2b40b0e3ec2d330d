"""verl 0.9 agent loop: SandboxTool loaded from a tool YAML, called through ToolAgentLoop._call_tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is installed by the [verl] extra")

from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.function_tool import FunctionTool, load_function_tools_from_path
from verl.tools.tool_registry import initialize_tools_from_config

from sandboxkit import InvalidRequest
from sandboxkit.integrations.verl import SandboxTool

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"


def agent_loop(tools: list) -> ToolAgentLoop:
    """The part of verl's ToolAgentLoop that calls tools (the rest needs a model server)."""
    loop = ToolAgentLoop.__new__(ToolAgentLoop)
    loop.tools = {tool.name: tool for tool in tools}
    loop.max_tool_response_length = 4000
    loop.tool_response_truncate_side = "middle"
    return loop


def trajectory(request_id: str) -> AgentData:
    return AgentData(
        messages=[],
        image_data=[],
        video_data=[],
        audio_data=None,
        mm_processor_kwargs=None,
        metrics={},
        request_id=request_id,
        tools_kwargs={},
    )


def code_call(code: str, **extra) -> FunctionCall:
    return FunctionCall(name="code_interpreter", arguments=json.dumps({"code": code, **extra}))


async def test_yaml_tool_keeps_a_trajectorys_files_across_calls() -> None:
    (tool,) = initialize_tools_from_config(str(EXAMPLES / "sandbox_tool_config.yaml"))
    assert isinstance(tool, SandboxTool) and tool.name == "code_interpreter"
    assert (tool.max_concurrency, tool.timeout_s, tool.language) == (16, 10.0, "python")
    loop = agent_loop([tool])
    traj_a, traj_b = trajectory("req-a"), trajectory("req-b")
    try:
        # verl calls create -> execute -> release on every call; the sandbox must outlive release.
        first, _, metrics = await loop._call_tool(
            code_call("open('state.txt', 'w').write('from call 1')\nprint('saved')"), {}, traj_a
        )
        assert first.text.strip() == "saved" and metrics["status"] == "ok"
        second, _, _ = await loop._call_tool(code_call("print(open('state.txt').read())"), {}, traj_a)
        assert second.text.strip() == "from call 1"
        other, _, metrics = await loop._call_tool(code_call("print(open('state.txt').read())"), {}, traj_b)
        assert "FileNotFoundError" in other.text and metrics["status"] == "failed"
        assert tool.open_sessions == 2
        # Malformed calls are answered, never raised.
        bad, _, _ = await loop._call_tool(FunctionCall(name="code_interpreter", arguments="{oops"), {}, traj_a)
        assert "Invalid JSON" in bad.text
        empty, _, _ = await loop._call_tool(FunctionCall(name="code_interpreter", arguments="{}"), {}, traj_a)
        assert "'code' argument is required" in empty.text
    finally:
        tool.close()
    assert tool.open_sessions == 0


async def test_sessions_expire_after_their_ttl() -> None:
    tool = SandboxTool({"type": "native", "backend": "subprocess", "session_ttl_s": 0.0, "default_timeout": 5})
    loop = agent_loop([tool])
    try:
        await loop._call_tool(code_call("open('x', 'w').write('1')"), {}, trajectory("r1"))
        assert tool.open_sessions == 1
        after, _, _ = await loop._call_tool(code_call("import os; print(os.path.exists('x'))"), {}, trajectory("r2"))
        assert after.text.strip() == "False"
        assert tool.open_sessions == 1  # r1's idle sandbox was released by the sweep
    finally:
        tool.close()


async def test_model_language_and_timeout_are_ignored_unless_allowed() -> None:
    strict = SandboxTool({"type": "native", "backend": "subprocess", "default_timeout": 1})
    relaxed = SandboxTool({"type": "native", "backend": "subprocess", "allow_model_language": True})
    try:
        out, _, _ = await strict.execute("i1", {"code": "echo hi", "language": "bash"})
        assert "SyntaxError" in out.text  # run as python, the configured language
        slow, _, metrics = await strict.execute("i1", {"code": "while True: pass", "timeout": 999})
        assert "time limit" in slow.text and metrics["status"] == "timeout"  # the configured 1 s applied
        out, _, _ = await relaxed.execute("i2", {"code": "echo hi", "language": "bash"})
        assert out.text.strip() == "hi"
    finally:
        strict.close()
        relaxed.close()


async def test_backend_down_returns_error_text(down_backend) -> None:
    tool = SandboxTool({"type": "native", "backend": down_backend, "default_timeout": 5})
    loop = agent_loop([tool])
    text, reward, metrics = await loop._call_tool(code_call("print(1)"), {}, trajectory("r"))
    assert text.text.startswith("Error: the code sandbox failed") and "unreachable" in text.text
    assert reward == 0.0 and metrics["status"] == "infra_error"
    tool.close()


async def test_function_tool_file_loads_through_verl() -> None:
    (tool,) = load_function_tools_from_path(str(EXAMPLES / "sandbox_function_tool.py"))
    assert isinstance(tool, FunctionTool) and tool.name == "code_interpreter" and tool.is_async
    assert tool.tool_schema.function.parameters.required == ["code"]
    text, _, _ = await agent_loop([tool])._call_tool(code_call("print(6 * 7)"), {}, trajectory("f"))
    assert text.text.strip() == "42"


async def test_stateless_mode_releases_each_calls_sandbox() -> None:
    tool = SandboxTool({"type": "native", "backend": "subprocess", "stateful": False, "default_timeout": 5})
    loop = agent_loop([tool])
    try:
        await loop._call_tool(code_call("open('x', 'w').write('1')"), {}, trajectory("same"))
        assert tool.open_sessions == 0  # released with the call
        after, _, _ = await loop._call_tool(code_call("import os; print(os.path.exists('x'))"), {}, trajectory("same"))
        assert after.text.strip() == "False"
    finally:
        tool.close()


def test_tool_yaml_names_the_backend_by_config_and_a_typo_fails_at_load(tmp_path: Path) -> None:
    yaml = (EXAMPLES / "sandbox_tool_config.yaml").read_text()
    assert "      backend: subprocess" in yaml
    good = tmp_path / "good.yaml"
    good.write_text(yaml.replace("      backend: subprocess", "      backend: {kind: subprocess, tmp_mb: 32}"))
    (tool,) = initialize_tools_from_config(str(good))
    try:
        assert isinstance(tool, SandboxTool) and tool.handle.backend_name == "subprocess"
    finally:
        tool.close()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.replace("      backend: subprocess", "      backend: {kind: subprocess, tmp_mbb: 32}"))
    with pytest.raises(InvalidRequest, match=r"unknown option 'tmp_mbb' \(did you mean 'tmp_mb'\?\)"):
        initialize_tools_from_config(str(bad))


async def test_fork_from_checkpoint_starts_each_rollout_from_the_prepared_task() -> None:
    tool = SandboxTool({"fork_from_checkpoint": True, "setup_command": "od -An -N8 -tx1 /dev/urandom > token"})
    loop = agent_loop([tool])
    kwargs = {"code_interpreter": {"create_kwargs": {"files": {"data.txt": "task one"}}}}
    read = code_call("print(open('token').read().strip(), open('data.txt').read())")
    try:
        outs = [(await loop._call_tool(read, kwargs, trajectory(f"r{i}")))[0].text for i in range(3)]
        assert len(set(outs)) == 1 and "task one" in outs[0], outs
        await loop._call_tool(code_call("open('data.txt', 'w').write('changed')"), kwargs, trajectory("r0"))
        again = [(await loop._call_tool(read, kwargs, trajectory(f"r{i}")))[0].text for i in range(3)]
        assert "changed" in again[0] and again[1] == again[2] == outs[0], again
        assert tool.open_sessions == 3
        metrics = tool.handle.pool.metrics()
        assert (metrics["checkpoints_taken"], metrics["forks"]) == (1, 3)
    finally:
        tool.close()


async def test_stateful_python_three_calls_share_an_interpreter() -> None:
    """The issue's must-show: verl's own loader and ``_call_tool``; call 2 uses call 1's function, call 3
    sees the variable call 2 mutated; another trajectory has its own interpreter."""
    (tool,) = initialize_tools_from_config(str(EXAMPLES / "stateful_python_tool_config.yaml"))
    assert isinstance(tool, SandboxTool) and tool.stateful_python
    (plain,) = initialize_tools_from_config(str(EXAMPLES / "sandbox_tool_config.yaml"))
    assert plain.tool_schema == tool.tool_schema  # the schema the model sees is unchanged
    plain.close()
    loop = agent_loop([tool])
    traj, other = trajectory("retool-1"), trajectory("retool-2")
    try:
        first, _, metrics = await loop._call_tool(
            code_call("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nmemo = {}\nfib(10)"), {}, traj
        )
        assert first.text.strip() == "55" and metrics["status"] == "ok" and not metrics["state_lost"]
        second, _, _ = await loop._call_tool(code_call("memo[20] = fib(20)\nprint('stored', memo[20])"), {}, traj)
        assert second.text.strip() == "stored 6765"
        third, _, _ = await loop._call_tool(code_call("memo"), {}, traj)
        assert third.text.strip() == "{20: 6765}"
        elsewhere, _, metrics = await loop._call_tool(code_call("fib(3)"), {}, other)
        assert "NameError: name 'fib' is not defined" in elsewhere.text and metrics["status"] == "error"
        # A cell that hangs is stopped; the answer tells the model its state is gone.
        hung, _, metrics = await loop._call_tool(code_call("while True:\n    pass", timeout=1), {}, traj)
        assert "time limit" in hung.text and "earlier calls are gone" in hung.text, hung.text
        assert metrics["status"] == "timeout" and metrics["state_lost"]
        after, _, _ = await loop._call_tool(code_call("'memo' in dir()"), {}, traj)
        assert after.text.strip() == "False"
    finally:
        tool.close()
