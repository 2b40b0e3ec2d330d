"""CPU smoke run of the verl pieces, without GPUs or Ray: the reward function and the tool, loaded as verl loads them.

    python examples/verl/smoke.py            # subprocess backend
    SANDBOXKIT_BACKEND=docker python examples/verl/smoke.py

1. ``reward_config.yaml`` -> verl's ``load_reward_manager`` -> the reward-loop ``naive`` manager scores
   one rollout (a DataProto) with ``sandboxkit.integrations.verl.compute_score``.
2. ``sandbox_tool_config.yaml`` -> verl's ``initialize_tools_from_config`` -> two tool calls of one
   trajectory, each ``create -> execute -> release`` as verl's agent loop makes them; the second
   call reads the file the first one wrote.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.tools.tool_registry import initialize_tools_from_config
from verl.trainer.ppo.reward import load_reward_manager

HERE = Path(__file__).resolve().parent
RESPONSE = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
GROUND_TRUTH = json.dumps({"inputs": ["1 2\n", "40 2\n"], "outputs": ["3\n", "42\n"]})


class OneTextTokenizer:
    """verl's naive manager only decodes the response; this one always decodes to RESPONSE."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return RESPONSE


async def score_one() -> dict:
    config = OmegaConf.load(HERE / "reward_config.yaml")
    backend = os.environ.get("SANDBOXKIT_BACKEND")
    if backend:  # the environment wins over the YAML in this smoke run
        config.reward.custom_reward_function.reward_kwargs.backend = backend
    manager = load_reward_manager(config, OneTextTokenizer())
    data = DataProto.from_single_dict(
        {
            "prompts": torch.zeros((1, 3), dtype=torch.long),
            "responses": torch.ones((1, 4), dtype=torch.long),
            "attention_mask": torch.ones((1, 7), dtype=torch.long),
            "data_source": np.array(["codecontests"], dtype=object),
            "reward_model": np.array([{"ground_truth": GROUND_TRUTH}], dtype=object),
            "extra_info": np.array([{}], dtype=object),
        }
    )
    return await manager.run_single(data)


async def two_tool_calls() -> list[str]:
    (tool,) = initialize_tools_from_config(str(HERE / "sandbox_tool_config.yaml"))
    if os.environ.get("SANDBOXKIT_BACKEND"):
        tool.close()
        tool = type(tool)({**tool.config, "backend": os.environ["SANDBOXKIT_BACKEND"]}, tool.tool_schema)
    trajectory = SimpleNamespace(request_id="smoke-trajectory")
    texts = []
    try:
        for code in ("open('memo.txt', 'w').write('written by call 1')\nprint('ok')", "print(open('memo.txt').read())"):
            instance_id, _ = await tool.create(create_kwargs={})
            try:
                response, _, _ = await tool.execute(instance_id, {"code": code}, agent_data=trajectory)
            finally:
                await tool.release(instance_id)
            texts.append(response.text)
    finally:
        tool.close()
    return texts


def main() -> int:
    scored = asyncio.run(score_one())
    print("reward:", scored["reward_score"], scored["reward_extra_info"])
    texts = asyncio.run(two_tool_calls())
    print("tool call 1:", texts[0].strip())
    print("tool call 2:", texts[1].strip())
    ok = scored["reward_score"] == 1.0 and texts[1].strip() == "written by call 1"
    print("smoke:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
