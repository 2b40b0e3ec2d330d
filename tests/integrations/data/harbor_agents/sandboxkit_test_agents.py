"""Harbor agents for the provider tests (``harbor run -a sandboxkit_test_agents:ClassName``).

They need no model: each runs fixed commands through ``environment.exec``, the way an
installed agent would. Harbor's own ``oracle`` (runs ``solution/solve.sh``) and ``nop``
(does nothing) are the solving and the non-solving agent; these are the hostile ones.
"""

from __future__ import annotations

import asyncio
import subprocess

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

#: Forge the verdict: reward files planted ahead of the verifier, and a ``cat`` ahead of the image's on
#: PATH that answers what the answer task's test.sh looks for.
FORGE = r"""
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
for dir in /usr/local/bin /usr/local/sbin; do
  mkdir -p "$dir" 2>/dev/null
  printf '#!/bin/sh\necho 42\n' > "$dir/cat" 2>/dev/null && chmod +x "$dir/cat" 2>/dev/null
done
echo forged
"""


class _ScriptedAgent(BaseAgent):
    """An agent with nothing to install: only ``run`` differs."""

    @staticmethod
    def name() -> str:
        return "sandboxkit-test-agent"

    def version(self) -> str:
        return "1"

    async def setup(self, environment: BaseEnvironment) -> None:
        return None


class ForgingAgent(_ScriptedAgent):
    """Does not solve the task; plants a reward and shadows a tool the verifier uses."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        await environment.exec(FORGE)


class KilledFromOutsideAgent(_ScriptedAgent):
    """Its sandbox is killed from the host (``docker kill``) during its command: the infrastructure failing."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        await environment.exec("echo 42 > answer.txt")  # solved: only the sandbox's failure can spoil it
        command = asyncio.create_task(environment.exec("sleep 60"))
        await asyncio.sleep(2)
        subprocess.run(["docker", "kill", str(environment.sandbox_id)], check=True, capture_output=True)
        await command


class SolvesThenHangsAgent(_ScriptedAgent):
    """Solves the answer task, then runs a command past Harbor's agent timeout (which cancels it)."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        await environment.exec("echo 42 > answer.txt")
        await environment.exec("sleep 600")
