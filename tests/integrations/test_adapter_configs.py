"""Every adapter takes a typed backend config, refuses a typo by name, and answers the code tool the same way."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from sandboxkit import InvalidRequest, PoolClosed
from sandboxkit.configs import SubprocessConfig
from sandboxkit.integrations._runtime import PoolHandle, env_settings
from sandboxkit.integrations.rllm import CONTINUE_MSG, SandboxEnv
from sandboxkit.integrations.sglang import CodeInterpreter, ToolCall
from sandboxkit.integrations.trl import SandboxReward
from sandboxkit.integrations.verl import SandboxTool, compute_score

SUM_TESTS = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
TYPO = f"unknown option 'tmp_mbb' (did you mean 'tmp_mb'?). Valid options: {', '.join(SubprocessConfig.option_names())}"


def test_a_typo_in_backend_options_fails_when_the_adapter_is_built() -> None:
    for build in (
        lambda: SandboxReward("subprocess", backend_options={"tmp_mbb": 32}),
        lambda: CodeInterpreter("subprocess", pool_options={"backend_options": {"tmp_mbb": 32}}),
        lambda: SandboxTool({"backend": "subprocess", "backend_options": {"tmp_mbb": 32}}),
        lambda: SandboxEnv({}, backend={"kind": "subprocess", "tmp_mbb": 32}),
    ):
        with pytest.raises(InvalidRequest) as info:
            build()
        assert TYPO in str(info.value)


async def test_verl_reward_kwargs_typo_is_an_invalid_score_naming_the_valid_keys() -> None:
    out = await compute_score("x", RIGHT, SUM_TESTS, backend="subprocess", backend_options={"tmp_mbb": 32})
    assert out["score"] == 0.0 and out["status"] == "invalid" and out["infra_error"] is False
    assert "did you mean 'tmp_mb'" in out["error"]


async def test_verl_reward_takes_a_backend_mapping_as_yaml_gives_it() -> None:
    out = await compute_score("x", RIGHT, SUM_TESTS, backend={"kind": "subprocess", "tmp_mb": 32})
    assert (out["score"], out["status"]) == (1.0, "ok")


def test_trl_reward_takes_a_config() -> None:
    with SandboxReward(SubprocessConfig(tmp_mb=32)) as reward:
        assert reward.handle.backend_name == "subprocess"
        assert reward.grade_sync(prompts=["p"], completions=[RIGHT], tests=[SUM_TESTS]) == [1.0]
        assert reward.handle.pool.backend.tmp_mb == 32  # type: ignore[attr-defined]


def test_env_can_name_a_backend_by_json_config() -> None:
    env = {"SANDBOXKIT_BACKEND": '{"kind": "docker", "image": "python:3.12"}', "SANDBOXKIT_BACKEND_OPTIONS": "{}"}
    assert env_settings(env)["backend"] == {"kind": "docker", "image": "python:3.12"}


def test_rllm_env_from_a_row_with_a_backend_mapping() -> None:
    env = SandboxEnv.from_dict({"problem_statement": "hi", "backend": {"kind": "subprocess", "tmp_mb": 32}})
    try:
        observation, info = env.reset()
        assert observation == "hi" and info["backend"] == "subprocess" and not info.get("infra_error")
        assert info["extra_info"] == {"problem_statement": "hi"}  # LLM-in-Sandbox's agent reads it
    finally:
        env.close()


@dataclass
class SandboxAction:
    """Shaped like llm-in-sandbox's ``Action``: an empty function name is a turn without a tool call."""

    function_name: str = ""
    parameters: dict[str, Any] | None = None


@dataclass
class EngineAction:
    """Shaped like rLLM's ``Action``, wrapping the agent's own action."""

    action: Any


def test_a_turn_without_a_tool_call_is_asked_for_one() -> None:
    env = SandboxEnv({"problem_statement": "p"}, backend="subprocess")
    try:
        env.reset()
        observation, reward, done, info = env.step(EngineAction(SandboxAction()))
        assert (observation, reward, done, info) == (CONTINUE_MSG, 0.0, False, {"tool_calls": 0})
        observation, _, _, _ = env.step(EngineAction(SandboxAction("execute_bash", {"command": "echo ok"})))
        assert observation.strip() == "ok"
    finally:
        env.close()


# ------------------------------------------------------------------ one code tool, one behaviour


@pytest.mark.parametrize(
    ("asked", "note"),
    [
        (999, "[note: the requested timeout of 999s was clamped to the maximum of 2s]"),
        (-5, "[note: the requested timeout of -5s was clamped to the minimum of 1s]"),
        (1.5, None),
    ],
)
async def test_sglang_and_verl_clamp_a_model_timeout_the_same_way(asked: float, note: str | None) -> None:
    sglang = CodeInterpreter("subprocess", timeout_s=5, allow_timeout=True, max_timeout_s=2)
    verl = SandboxTool({"backend": "subprocess", "default_timeout": 5, "allow_model_timeout": True, "max_timeout": 2})
    try:
        arguments = {"code": "print('ran')", "timeout": asked}
        (message,) = await sglang.execute([ToolCall("code_interpreter", arguments)])
        response, _, metrics = await verl.execute("i", arguments)
        assert message["content"] == response.text and metrics["status"] == "ok"
        assert response.text == ("ran" if note is None else f"ran\n{note}")
    finally:
        sglang.close()
        verl.close()


async def test_a_clamped_timeout_is_enforced() -> None:
    with CodeInterpreter("subprocess", timeout_s=5, allow_timeout=True, max_timeout_s=1) as tool:
        (message,) = await tool.execute(
            [ToolCall("code_interpreter", {"code": "import time; time.sleep(4); print('late')", "timeout": 30})]
        )
    assert "time limit" in message["content"] and "late" not in message["content"]
    assert "clamped to the maximum of 1s" in message["content"]


@pytest.mark.parametrize("asked", ["soon", True, float("nan"), [1]])
async def test_a_timeout_that_is_not_a_number_is_answered_not_run(asked: Any) -> None:
    sglang = CodeInterpreter("subprocess", allow_timeout=True)
    verl = SandboxTool({"backend": "subprocess", "allow_model_timeout": True})
    try:
        (message,) = await sglang.execute([ToolCall("code_interpreter", {"code": "print(1)", "timeout": asked})])
        response, _, metrics = await verl.execute("i", {"code": "print(1)", "timeout": asked})
        assert message["content"] == response.text == f"Error: timeout must be a number of seconds, got {asked!r}"
        assert metrics["status"] == "invalid_call" and not sglang.handle.created
    finally:
        sglang.close()
        verl.close()


# ------------------------------------------------------------------ a call cancelled on the pool's side


async def _cancelled_on_the_pool(_pool: Any) -> None:
    raise asyncio.CancelledError  # what a pool shutting down does to the calls it still runs


async def test_a_call_cancelled_on_the_pools_side_is_pool_closed_not_a_cancelled_error() -> None:
    handle = PoolHandle("subprocess")
    try:
        with pytest.raises(PoolClosed, match="closed while the call was in flight"):
            await handle.acall(_cancelled_on_the_pool, 30)
        with pytest.raises(PoolClosed, match="closed while the call was in flight"):
            await asyncio.to_thread(handle.call, _cancelled_on_the_pool, 30)
    finally:
        handle.close()


async def test_a_pool_closed_under_a_batch_gives_none_at_once() -> None:
    slow = "```python\nimport time; time.sleep(20)\n```"
    reward = SandboxReward("subprocess", deadline_s=60)
    reward.handle.pool  # build it now, so the close below lands during the batch  # noqa: B018
    timer = threading.Timer(1.0, reward.handle.close)
    timer.start()
    started = time.monotonic()
    try:
        rewards = await asyncio.wait_for(reward(prompts=["p"], completions=[slow], tests=[SUM_TESTS]), 30)
    finally:
        timer.cancel()
        reward.close()
    assert rewards == [None] and time.monotonic() - started < 15  # not the 20 s program, not the 60 s deadline


# ------------------------------------------------------------------ blocking forms run the async ones


async def test_blocking_forms_work_inside_a_running_loop() -> None:
    # A notebook cell or an async trainer calling the sync form: the coroutine runs on a helper thread.
    with CodeInterpreter("subprocess") as tool:
        (message,) = tool.respond_sync(
            '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(7)"}}</tool_call>'
        )
        assert message["content"] == "7"
    with SandboxReward("subprocess") as reward:
        assert reward.grade_sync(prompts=["p"], completions=[RIGHT], tests=[SUM_TESTS]) == [1.0]


def test_blocking_forms_match_the_async_ones() -> None:
    for sync, coro in (
        (CodeInterpreter.execute_sync, CodeInterpreter.execute),
        (CodeInterpreter.respond_sync, CodeInterpreter.respond),
    ):
        assert list(inspect.signature(sync).parameters) == list(inspect.signature(coro).parameters)
    reward_params = list(inspect.signature(SandboxReward.__call__).parameters)
    assert list(inspect.signature(SandboxReward.grade_sync).parameters) == [
        p for p in reward_params if p != "completion_ids"
    ]
