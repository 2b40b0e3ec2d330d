"""verl 0.9 reward loop: compute_score loaded the way verl loads it, run by the reward-loop ``naive`` manager."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is installed by the [verl] extra")

import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager

from sandboxkit.integrations.verl import SCORE_KEYS, compute_score, compute_score_sync

GROUND_TRUTH = json.dumps({"inputs": ["1 2\n", "4 5\n", "10 -3\n"], "outputs": ["3\n", "9\n", "7\n"]})

RESPONSES = {
    "correct": "Here you go:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "partly": "```python\na, b = map(int, input().split())\nprint(a + b if a < 5 else 0)\n```",
    "syntax": "```python\nprint(\n```",
    "no_code": "I cannot solve this.",
}


class ListTokenizer:
    """verl's manager only calls ``decode``: token id i decodes to the i-th canned response."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.texts[int(ids[0])]


def sample(index: int, ground_truth: str, data_source: str = "codecontests") -> DataProto:
    """One rollout as verl builds it: prompt + response tensors and the row's non-tensor fields."""
    return DataProto.from_single_dict(
        {
            "prompts": torch.zeros((1, 3), dtype=torch.long),
            "responses": torch.full((1, 4), index, dtype=torch.long),
            "attention_mask": torch.ones((1, 7), dtype=torch.long),
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth}], dtype=object),
            "extra_info": np.array([{"index": index}], dtype=object),
        }
    )


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/run_code"  # nothing listens there any more


def manager(tokenizer: ListTokenizer, **reward_kwargs):
    """The manager verl's RewardLoopWorker builds, from the config keys a user would set."""
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://sandboxkit.integrations.verl",
                    "name": "compute_score",
                    "reward_kwargs": reward_kwargs,
                },
                "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": None}},
            }
        }
    )
    return load_reward_manager(config, tokenizer)


async def test_naive_reward_loop_manager_scores_with_stable_keys() -> None:
    names = list(RESPONSES)
    tok = ListTokenizer([RESPONSES[n] for n in names])
    rm = manager(tok, backend="subprocess", timeout=5, max_concurrency=4)
    outs = {name: await rm.run_single(sample(i, GROUND_TRUTH)) for i, name in enumerate(names)}

    assert outs["correct"]["reward_score"] == 1.0
    assert outs["partly"]["reward_score"] == pytest.approx(2 / 3)
    assert outs["syntax"]["reward_score"] == 0.0 and outs["syntax"]["reward_extra_info"]["status"] == "compile_error"
    assert outs["no_code"]["reward_score"] == 0.0
    assert outs["no_code"]["reward_extra_info"]["status"] in ("no_code", "compile_error")
    for out in outs.values():
        info = out["reward_extra_info"]
        assert tuple(info) == SCORE_KEYS
        assert info["score"] == out["reward_score"] and info["infra_error"] is False

    # verl builds its columns from the first sample's keys: every other sample must have them all.
    infos = [o["reward_extra_info"] for o in outs.values()]
    columns = {key: np.array([info[key] for info in infos]) for key in infos[0]}
    assert columns["passed"].tolist() == [3, 2, 0, 0]

    batch = DataProto.concat([sample(i, GROUND_TRUTH) for i in range(len(names))])
    rm_scores = rm.assemble_rm_scores(batch, [o["reward_score"] for o in outs.values()])
    assert rm_scores[:, -1].tolist() == pytest.approx([1.0, 2 / 3, 0.0, 0.0])


async def test_backend_down_gives_a_flagged_score_with_the_same_keys() -> None:
    tok = ListTokenizer([RESPONSES["correct"]])
    rm = manager(tok, backend="sandbox_fusion", backend_options={"url": closed_port_url()}, deadline_s=30)
    out = await rm.run_single(sample(0, GROUND_TRUTH))
    info = out["reward_extra_info"]
    assert tuple(info) == SCORE_KEYS
    assert out["reward_score"] == 0.0
    assert info["infra_error"] is True and info["status"] == "infra_error" and info["error"]


async def test_invalid_ground_truth_and_bad_settings_are_flagged_not_raised() -> None:
    bad_tests = await compute_score("apps", RESPONSES["correct"], '{"inputs": ["1"]}')
    assert tuple(bad_tests) == SCORE_KEYS and bad_tests["status"] == "invalid" and bad_tests["score"] == 0.0
    bad_language = await compute_score("apps", RESPONSES["correct"], GROUND_TRUTH, language="cobol-85")
    assert tuple(bad_language) == SCORE_KEYS and bad_language["status"] == "invalid"


async def test_continuous_grades_only_the_first_ten_cases() -> None:
    inputs = [f"{i} 0\n" for i in range(12)]
    outputs = [f"{i}\n" for i in range(10)] + ["wrong\n", "wrong\n"]
    gt = {"inputs": inputs, "outputs": outputs}
    full = await compute_score("taco", RESPONSES["correct"], gt)
    first_ten = await compute_score("taco", RESPONSES["correct"], gt, continuous=True)
    assert full["total"] == 12 and full["score"] == pytest.approx(10 / 12)
    assert first_ten["total"] == 10 and first_ten["score"] == 1.0


def test_environment_configures_the_backend(monkeypatch) -> None:
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "sandbox_fusion")
    monkeypatch.setenv("SANDBOXKIT_BACKEND_OPTIONS", json.dumps({"url": closed_port_url()}))
    monkeypatch.setenv("SANDBOXKIT_DEADLINE_S", "30")
    assert compute_score_sync("apps", RESPONSES["correct"], GROUND_TRUTH) == 0.0  # flagged, not raised
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "subprocess")
    monkeypatch.delenv("SANDBOXKIT_BACKEND_OPTIONS")
    assert compute_score_sync("apps", RESPONSES["correct"], GROUND_TRUTH) == 1.0


async def test_function_call_and_assert_ground_truths() -> None:
    fn = {"fn_name": "add", "inputs": ["1\n2", "3\n4"], "outputs": ["3", "7"]}
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    assert (await compute_score("apps", code, fn))["score"] == 1.0
    asserts = {"assert_case": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]}
    assert (await compute_score("apps", code, asserts))["score"] == 0.5


async def test_limiter_setting_reaches_the_pool(monkeypatch) -> None:
    # limiter="ray" without ray.init() falls back to the local limiter (with one warning) and scores.
    from sandboxkit.integrations._runtime import env_settings
    from sandboxkit.integrations._verl_reward import _reward_settings, handle_for

    monkeypatch.setenv("SANDBOXKIT_LIMITER", "ray")
    assert env_settings()["limiter"] == "ray"
    settings = _reward_settings({"backend": "subprocess", "max_concurrency": 3}, None)
    handle = handle_for(settings)
    assert handle._options["limiter"] == "ray"
    out = await compute_score("apps", RESPONSES["correct"], GROUND_TRUTH, max_concurrency=3)
    assert out["score"] == 1.0 and out["infra_error"] is False


async def test_reward_kwargs_name_the_backend_by_config_mapping() -> None:
    # What `reward_kwargs: {backend: {kind: subprocess, tmp_mb: 32}}` in a verl YAML becomes (an OmegaConf node).
    tok = ListTokenizer([RESPONSES["correct"]])
    rm = manager(tok, backend={"kind": "subprocess", "tmp_mb": 32}, timeout=5)
    out = await rm.run_single(sample(0, GROUND_TRUTH))
    assert out["reward_score"] == 1.0 and out["reward_extra_info"]["status"] == "ok"
    typo = manager(tok, backend={"kind": "subprocess", "tmp_mbb": 32})
    info = (await typo.run_single(sample(0, GROUND_TRUTH)))["reward_extra_info"]
    assert info["status"] == "invalid" and "did you mean 'tmp_mb'" in info["error"] and info["infra_error"] is False
