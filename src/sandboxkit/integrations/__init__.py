"""Thin adapters that plug sandboxkit into the trainers people already run.

Each adapter lives in its own module and imports its trainer lazily or only there, so
``import sandboxkit.integrations.trl`` never imports verl and vice versa:

* :mod:`sandboxkit.integrations.trl`: ``SandboxReward``, a GRPO reward function.
* :mod:`sandboxkit.integrations.verl`: ``compute_score`` (reward loop) and ``SandboxTool`` (agent loop).
* :mod:`sandboxkit.integrations.sglang`: the ``code_interpreter`` schema, tool-call parsers and an executor.
* :mod:`sandboxkit.integrations.rllm`: ``SandboxEnv`` (rLLM ``BaseEnv``) and ``RLLMSandbox``.

Policy (caps, retries, deadlines, reuse) lives in the pool; grading lives in the judge. An
adapter only translates the trainer's shapes and maps infrastructure failures to what the
trainer understands as "no signal".
"""

__all__: list[str] = []
