"""rLLM with sandboxkit: ``SandboxEnv`` episodes the way rLLM's execution engine runs them.

    python examples/rllm_env.py --fast                      # 4 scripted episodes on the subprocess backend
    python examples/rllm_env.py --backend docker -n 64      # 64 at once from a 64-thread pool

A scripted "agent" stands in for the model here, so the example runs anywhere; it makes the
same calls a model would (create a file, run it, fix it, run it again, submit). With rLLM
installed from git, hand the class to rLLM instead:

* rLLM <= 0.2.x and the LLM-in-Sandbox-RL fork (the ``BaseEnv`` + AgentExecutionEngine stack):
  ``AgentTrainer(agent_class=..., env_class=SandboxEnv, env_args={"backend": "docker"}, ...)``;
  each dataset row becomes one environment through ``SandboxEnv.from_dict({**row, **env_args})``.
* rLLM main (workflows): ``MultiTurnWorkflow`` builds ``SandboxEnv(**env_args)`` once and calls
  ``reset(task=row)`` per task, which SandboxEnv accepts; for rLLM's newer sandbox layer use
  ``sandboxkit.integrations.rllm.RLLMSandbox``, which implements ``rllm.sandbox.protocol.Sandbox``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import time
from typing import Any

from sandboxkit.integrations._runtime import close_shared_handles
from sandboxkit.integrations.rllm import TOOLS, SandboxEnv
from sandboxkit.registry import parse_backend_options

log = logging.getLogger("rllm_env")

ROW = {
    "problem_statement": "Create /testbed/solution.py that reads two integers and prints their sum.",
    "files": {"/testbed/README.md": "Input: two integers on one line. Output: their sum.\n"},
    "tests": {"inputs": ["1 2\n", "20 22\n"], "outputs": ["3\n", "42\n"]},
    "solution_path": "/testbed/solution.py",
}

#: What a model would do, as OpenAI-style tool calls (the first attempt has a bug).
SCRIPT: list[dict[str, Any]] = [
    {"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed/README.md"}},
    {
        "name": "str_replace_editor",
        "arguments": {
            "command": "create",
            "path": "/testbed/solution.py",
            "file_text": "a, b = map(int, input().split())\nprint(a * b)\n",
        },
    },
    {"name": "execute_bash", "arguments": {"command": "echo 1 2 | python3 /testbed/solution.py"}},
    {
        "name": "str_replace_editor",
        "arguments": {"command": "str_replace", "path": "/testbed/solution.py", "old_str": "a * b", "new_str": "a + b"},
    },
    {"name": "execute_bash", "arguments": {"command": "echo 1 2 | python3 /testbed/solution.py"}},
    {"name": "submit", "arguments": {}},
]


def run_episode(env_args: dict[str, Any], max_steps: int = 10) -> float:
    """reset -> step ... -> compute_final_reward -> close, as rLLM's AgentExecutionEngine calls them."""
    env = SandboxEnv.from_dict({**ROW, **env_args})
    try:
        observation, info = env.reset()
        if info.get("infra_error"):
            log.warning("sandbox unavailable: %s", info["error"])
        for action in SCRIPT[:max_steps]:
            observation, _reward, done, info = env.step(action)
            log.debug("%s -> %s", action["name"], observation[:80])
            if done:
                break
        return env.compute_final_reward()
    finally:
        env.close()


def main(argv: list[str] | None = None) -> list[float]:
    """Run ``-n`` episodes from a thread pool and return their rewards."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="subprocess")
    parser.add_argument("-o", "--backend-option", action="append", default=[], help="KEY=VALUE, checked (repeatable)")
    parser.add_argument("-n", "--episodes", type=int, default=None, help="episodes (default 4 with --fast, else 64)")
    parser.add_argument("--threads", type=int, default=64, help="rLLM's engine uses a 64-thread pool")
    parser.add_argument("--fast", action="store_true", help="a few episodes, for CI smoke tests")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    n = args.episodes or (4 if args.fast else 64)
    backend = {"kind": args.backend, **parse_backend_options(args.backend, args.backend_option)}
    env_args = {"backend": backend, "workdir": "/testbed", "timeout": 30}  # a {"kind": ...} mapping, as YAML gives
    log.info("tools offered to the model: %s", [t["function"]["name"] for t in TOOLS])
    started = time.perf_counter()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.threads) as pool:
            rewards = list(pool.map(lambda _: run_episode(env_args), range(n)))
    finally:
        close_shared_handles()
    log.info(
        "%d episodes on %s in %.1fs: mean reward %.2f", n, args.backend, time.perf_counter() - started, sum(rewards) / n
    )
    return rewards


if __name__ == "__main__":
    main()
