"""Agent environments end to end: an LLM-in-Sandbox-RL row and a Harbor task, driven by scripted agents.

    python examples/agent_tasks.py                       # LLM-in-Sandbox rows on the subprocess backend
    python examples/agent_tasks.py --backend docker --harbor   # plus a Harbor task (needs Docker)

A real run replaces the scripted actions with a model's tool calls (rLLM's engine, or TRL's
``environment_factory=HarborToolEnv``); the environments, sandboxes and rewards are the same.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from sandboxkit.integrations._runtime import close_shared_handles
from sandboxkit.integrations.harbor import HarborEnv
from sandboxkit.integrations.rllm import SandboxEnv

ROW = {
    "id": "demo-0",
    "domain": "math",
    "problem_statement": "Add up the numbers in /testbed/documents/nums.txt and write the sum to /testbed/answer.txt.",
    "ground_truth": "12",
    "input_files": json.dumps({"nums.txt": "3\n4\n5\n"}),
}
SUM = "python3 -c \"print(sum(int(x) for x in open('/testbed/documents/nums.txt')))\" > /testbed/answer.txt"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call as a model emits it (OpenAI / hermes shape)."""
    return {"name": name, "arguments": arguments}


def llm_in_sandbox_episode(backend: str, command: str) -> float:
    """One LLM-in-Sandbox-RL episode: read the documents, write answer.txt, submit."""
    env = SandboxEnv.from_dict({**ROW, "backend": backend})
    try:
        env.reset()
        env.step(call("execute_bash", command="ls /testbed/documents"))
        env.step(call("execute_bash", command=command))
        _, reward, _, info = env.step(call("submit"))
        print(f"llm-in-sandbox on {backend}: reward={reward} ({info['reward_status']})")
        return reward
    finally:
        env.close()


def harbor_task(root: Path) -> Path:
    """A minimal Harbor task directory: the verifier checks /testbed/answer.txt."""
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_text("Write 42 to /testbed/answer.txt.\n")
    (root / "task.toml").write_text(
        '[environment]\ndocker_image = "sandboxkit-base:latest"\nworkdir = "/testbed"\n[verifier]\ntimeout_sec = 60\n'
    )
    (root / "tests" / "test.sh").write_text(
        '#!/bin/sh\n[ "$(cat /testbed/answer.txt)" = 42 ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    return root


def harbor_episode(backend: str) -> float:
    """One Harbor episode: the agent writes the answer, the task's test.sh grades it."""
    with tempfile.TemporaryDirectory() as tmp:
        env = HarborEnv(harbor_task(Path(tmp) / "answer-task"), backend=backend)
        try:
            env.reset()
            env.step(call("execute_bash", command="echo 42 > answer.txt"))
            _, reward, _, info = env.step(call("submit"))
            print(f"harbor on {backend}: reward={reward} ({info['reward_status']})")
            return reward
        finally:
            env.close()


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the episodes and return their rewards."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="subprocess", help="sandboxkit backend (subprocess, docker, ...)")
    parser.add_argument("--harbor", action="store_true", help="also run a Harbor task (Docker, or a root filesystem)")
    args = parser.parse_args(argv)
    try:
        rewards = {
            "right": llm_in_sandbox_episode(args.backend, SUM),
            "wrong": llm_in_sandbox_episode(args.backend, "echo 13 > /testbed/answer.txt"),
        }
        if args.harbor:
            rewards["harbor"] = harbor_episode(args.backend)
        return rewards
    finally:
        close_shared_handles()


if __name__ == "__main__":
    main()
