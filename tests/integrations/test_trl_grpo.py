"""TRL GRPOTrainer on CPU with SandboxReward on the subprocess backend: logged rewards equal direct grading."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="trl is installed by the [trl] extra")

from trl.trainer.utils import is_async_callable

from sandboxkit import SyncSandboxPool
from sandboxkit.integrations.trl import SandboxReward
from sandboxkit.judge import grade

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Capture:
    """A second reward function (weight 0) that records what the trainer handed to the rewards."""

    __name__ = "capture"

    def __init__(self) -> None:
        self.batches: list[tuple[list[Any], list[Any]]] = []

    def __call__(self, prompts=None, completions=None, completion_ids=None, **columns) -> list[float]:
        self.batches.append((list(completions), list(columns["tests"])))
        return [0.0] * len(completions)


def test_grpo_trainer_logs_the_rewards_the_judge_gives(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    example = load_example()
    capture = Capture()
    with SandboxReward("subprocess", max_concurrency=8, name="sandbox_reward") as reward:
        trainer = example.make_trainer(
            tiny=True,
            reward_funcs=[reward, capture],
            reward_weights=[1.0, 0.0],
            steps=2,
            output_dir=str(tmp_path),
        )
        assert trainer.reward_func_names == ["sandbox_reward", "capture"]
        assert is_async_callable(reward)  # so TRL awaits it on its own loop, concurrently with other rewards
        trainer.train()

    logged = [e["rewards/sandbox_reward/mean"] for e in trainer.state.log_history if "rewards/sandbox_reward/mean" in e]
    assert len(logged) == 2 and len(capture.batches) == 2

    # Grade the very same completions directly, outside the trainer, with a pool of our own.
    seen: list[float] = []
    with SyncSandboxPool("subprocess", max_concurrency=8) as pool:
        for (completions, tests), mean in zip(capture.batches, logged, strict=True):
            assert len(completions) == 4 and all(isinstance(c, str) for c in completions)
            futures = [
                pool.submit(lambda p, c=c, t=t: grade(p, c, t, language="python", shaping="pass_rate"))
                for c, t in zip(completions, tests, strict=True)
            ]
            rewards = [f.result(timeout=120).reward for f in futures]
            assert all(r is not None for r in rewards)
            assert math.isclose(mean, sum(rewards) / len(rewards), rel_tol=1e-6, abs_tol=1e-6)
            seen += rewards
    assert len(set(seen)) > 1, f"the tiny model's programs all scored the same ({seen}); the check would be vacuous"
