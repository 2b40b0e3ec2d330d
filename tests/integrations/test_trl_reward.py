"""SandboxReward called the way TRL calls reward functions: keywords only, dataset columns as lists."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest

from sandboxkit import Limits
from sandboxkit.integrations.trl import SandboxReward, SyncSandboxReward

SUM_TESTS = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
HALF = "```python\na, b = map(int, input().split())\nprint(3)\n```"
WRONG = "```python\nprint('no')\n```"


def trl_kwargs(n: int, **columns):
    """What TRL adds besides the dataset columns."""
    logged: dict[str, object] = {}
    return {
        "trainer_state": object(),
        "log_extra": lambda column, values: logged.__setitem__(column, values),
        "log_metric": lambda name, value: logged.__setitem__(name, value),
        **columns,
    }, logged


async def test_standard_completions_get_their_pass_rates() -> None:
    with SandboxReward("subprocess", name="code_reward", max_concurrency=4) as reward:
        assert reward.__name__ == "code_reward"
        extra, logged = trl_kwargs(3, tests=[SUM_TESTS] * 3)
        rewards = await reward(prompts=["p"] * 3, completions=[RIGHT, HALF, WRONG], completion_ids=[[1]] * 3, **extra)
    assert rewards == [1.0, 0.5, 0.0]
    assert logged["code_reward_status"] == ["ok", "failed", "failed"]
    assert logged["code_reward/infra_failure_rate"] == 0.0


async def test_conversational_completions_and_a_language_column() -> None:
    bash_tests = json.dumps({"inputs": [""], "outputs": ["hi\n"]})
    completions = [
        [{"role": "assistant", "content": RIGHT}],
        [{"role": "assistant", "content": "```bash\necho hi\n```"}],
    ]
    with SandboxReward("subprocess") as reward:
        rewards = await reward(
            prompts=[[{"role": "user", "content": "q"}]] * 2,
            completions=completions,
            tests=[SUM_TESTS, bash_tests],
            language=["python", "bash"],
        )
    assert rewards == [1.0, 1.0]


async def test_backend_down_gives_none_and_never_raises(down_backend) -> None:
    with SandboxReward(down_backend) as reward:
        extra, logged = trl_kwargs(2, tests=[SUM_TESTS] * 2)
        rewards = await reward(prompts=["p", "p"], completions=[RIGHT, RIGHT], **extra)
    assert rewards == [None, None]
    assert logged["sandbox_reward/infra_failure_rate"] == 1.0


async def test_bad_inputs_give_none_per_row() -> None:
    with SandboxReward("subprocess") as reward:
        assert await reward(prompts=["p"], completions=[RIGHT]) == [None]  # no tests column
        assert await reward(prompts=["p"] * 2, completions=[RIGHT] * 2, tests=[SUM_TESTS]) == [None, None]
        rewards = await reward(prompts=["p"] * 2, completions=[RIGHT] * 2, tests=[SUM_TESTS, '{"inputs": 3}'])
        assert rewards == [1.0, None]  # unreadable tests say nothing about the model
        assert await reward(prompts=[], completions=[], tests=[]) == []


async def test_a_hung_program_past_the_deadline_gets_none_and_the_batch_returns() -> None:
    hang = "```python\nimport time\ntime.sleep(120)\n```"
    reward = SandboxReward("subprocess", deadline_s=5.0, limits=Limits(timeout_s=120))
    try:
        rewards = await reward(prompts=["p"] * 2, completions=[hang, RIGHT], tests=[SUM_TESTS] * 2)
    finally:
        reward.close()
    assert rewards == [None, 1.0]


def test_sync_twin_and_trl_detection() -> None:
    reward = SandboxReward("subprocess", name="r")
    try:
        assert reward.for_trl() is reward  # TRL 1.16 awaits async callable objects
        sync = reward.as_sync()
        assert isinstance(sync, SyncSandboxReward) and sync.__name__ == "r"
        assert sync(prompts=["p"], completions=[HALF], completion_ids=[[1]], tests=[SUM_TESTS]) == [0.5]

        async def from_a_running_loop() -> list[float | None]:
            # A sync caller on a thread with its own running loop still works (the pool has its own thread).
            return sync(prompts=["p"], completions=[RIGHT], tests=[SUM_TESTS])

        assert asyncio.run(from_a_running_loop()) == [1.0]
    finally:
        reward.close()


async def test_pickles_without_its_pool() -> None:
    reward = SandboxReward("subprocess", name="picklable")
    try:
        assert await reward(prompts=["p"], completions=[RIGHT], tests=[SUM_TESTS]) == [1.0]
        clone = pickle.loads(pickle.dumps(reward))  # TRL's async GRPO ships rewards to a child process
        assert clone.__name__ == "picklable" and not clone.handle.created
        assert await clone(prompts=["p"], completions=[RIGHT], tests=[SUM_TESTS]) == [1.0]
        clone.close()
    finally:
        reward.close()


def test_a_pool_instance_is_rejected_with_advice() -> None:
    from sandboxkit import SandboxPool

    with pytest.raises(ValueError, match="SyncSandboxPool"):
        SandboxReward(SandboxPool("subprocess"))


C_SUM_TESTS = json.dumps({"inputs": [f"{i} {i}\n" for i in range(6)], "outputs": [f"{2 * i}\n" for i in range(6)]})
C_RIGHT = '```c\n#include <stdio.h>\nint main(void){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);return 0;}\n```'
C_SPIN = "```c\nint main(void){for(;;);}\n```"


async def test_a_program_that_times_out_every_case_cannot_dodge_its_zero_past_the_deadline() -> None:
    """Six 1 s cases one after another (a compiled session) cannot fit a 4 s deadline if each times out.

    The time went to the program's own timeouts, so it is the program's outcome (0.0), not ``None``; a
    right program under the same deadline still scores 1.0.
    """
    reward = SandboxReward("subprocess", deadline_s=4.0, limits=Limits(timeout_s=1), language="c")
    try:
        rewards = await reward(prompts=["p"] * 2, completions=[C_SPIN, C_RIGHT], tests=[C_SUM_TESTS] * 2)
        spin = reward.last_verdicts[0]
    finally:
        reward.close()
    assert rewards == [0.0, 1.0]
    assert spin is not None and spin.status == "timeout" and not spin.infra_error
    assert any("not run" in (c.message or "") for c in spin.cases)
