"""verl adapters: ``compute_score`` for the reward loop, ``SandboxTool`` and ``code_interpreter`` for the agent loop.

**Reward.** verl (>= 0.7.1) loads a custom reward function with::

    reward.custom_reward_function.path=pkg://sandboxkit.integrations.verl
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.backend=docker      # optional; or SANDBOXKIT_BACKEND

and its reward-loop managers call it per sample with keywords only, awaiting it when it is
a coroutine function. The ground truth is verl's (a dict or JSON string with
``inputs``/``outputs``, optional ``fn_name``, or ``assert_case``) or any shape the judge reads.
verl has no timeout around reward functions and builds its extra-info columns from the
*first* sample's keys, so ``compute_score`` never raises, never waits past ``deadline_s``,
and returns the same keys on every path: an infrastructure failure scores 0.0 with
``infra_error=True`` and ``status="infra_error"`` so it can be filtered, not learned from.

**Tool.** verl >= 0.8 dropped its ``SandboxFusionTool``. :class:`SandboxTool` is a
``BaseTool`` for the tool YAML (``class_name: sandboxkit.integrations.verl.SandboxTool``)
that accepts the old tool's config keys. The agent loop calls ``create -> execute -> release``
on *every* call, so the sandbox of a trajectory is keyed on ``agent_data.request_id`` and
kept until a TTL passes; files persist from one call to the next. :func:`code_interpreter`
is the stateless function form for ``multi_turn.function_tool_path`` (see ``examples/verl/``).

The reward lives in :mod:`._verl_reward` and the tools in :mod:`._verl_tool`; this module is the
stable path that verl's config (``pkg://sandboxkit.integrations.verl``, the YAML ``class_name``)
and users import from.
"""

from __future__ import annotations

from sandboxkit.integrations._verl_reward import SCORE_KEYS, compute_score, compute_score_sync
from sandboxkit.integrations._verl_tool import SandboxTool, code_interpreter

__all__ = ["SCORE_KEYS", "SandboxTool", "code_interpreter", "compute_score", "compute_score_sync"]
