"""Harbor tasks on sandboxkit: load a task directory, verify a sandbox, train on it with rLLM.

A Harbor task (the task format of the ``harbor`` package, used by Terminal-Bench, TRL, SkyRL,
verifiers and NeMo Gym) is a directory::

    instruction.md          what the agent is asked to do
    task.toml               [environment] docker_image / workdir / cpus / memory_mb / allow_internet,
                            [verifier] timeout_sec / env, [agent] timeout_sec
    environment/Dockerfile  the image, when task.toml names none
    tests/test.sh           copied to /tests and run after the agent; writes /logs/verifier/reward.txt
                            (a number) or /logs/verifier/reward.json ({"reward": 1.0, ...})
    solution/solve.sh       a reference solution (optional)

:class:`HarborTask` reads one; :meth:`HarborTask.verify` grades a sandbox the way Harbor's
verifier does (tests uploaded to ``/tests``, ``test.sh`` run with the verifier's timeout and
environment, the reward file read back); :class:`HarborEnv` is an rLLM environment on it and
:class:`HarborToolEnv` a TRL ``environment_factory``. (Loading lives in ``_harbor_task``,
verifying in ``_harbor_verify``.)

Rewards are never invented. A reward file that is missing, empty or unreadable, a verifier
that times out, or a sandbox that fails gives ``reward=None`` (no reward: Harbor itself records
such a trial as an exception, not as 0). The verifier's output directory is emptied before
``test.sh`` runs, so a reward file the agent planted there cannot be read as the verdict.

Absolute paths (``/tests``, ``/logs/verifier``, the task's working directory) must be real,
so the backend must have sandboxes with their own root filesystem
(``capabilities.absolute_paths``): Docker, or subprocess with a root filesystem.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from sandboxkit.errors import InvalidRequest, SandboxkitError
from sandboxkit.integrations._harbor_task import HarborTask, HarborTaskError
from sandboxkit.integrations._harbor_verify import HarborVerdict, parse_reward_files, verify_session
from sandboxkit.integrations._runtime import BackendLike
from sandboxkit.integrations.rllm import SandboxEnv

__all__ = [
    "HarborEnv",
    "HarborTask",
    "HarborTaskError",
    "HarborToolEnv",
    "HarborVerdict",
    "parse_reward_files",
    "verify_session",
]

log = logging.getLogger(__name__)


class HarborEnv(SandboxEnv):
    """An rLLM environment on a Harbor task: the agent works in the task's image, ``test.sh`` grades it.

    The observation at reset is ``instruction.md``; the tools are :class:`SandboxEnv`'s
    (``execute_bash``, ``str_replace_editor``, ``submit``), run in the task's working
    directory. The final reward is the verifier's; ``final_info`` holds the whole
    :class:`HarborVerdict` (``reward`` is ``None`` when there is no reward to trust, and
    ``compute_final_reward`` then returns 0.0 with ``infra_error`` set where the sandbox failed).

    Args:
        task: a :class:`HarborTask` or the path of a task directory.
        backend: ``"docker"`` (the task's image, built from its Dockerfile when needed) or
            another backend whose sandboxes have their own root filesystem.
        **options: :class:`SandboxEnv` options (``timeout``, ``pool_options``, ``backend_options``...).
    """

    def __init__(self, task: HarborTask | str | Path, *, backend: BackendLike = "docker", **options: Any) -> None:
        self.harbor_task = task if isinstance(task, HarborTask) else HarborTask.load(task)
        backend_options = dict(options.pop("backend_options", None) or {})
        if backend == "docker":
            backend_options = {**self.harbor_task.docker_options(), **backend_options}
        elif backend == "subprocess":  # the task's image as a root filesystem, unless the caller gives one
            backend_options = {**self.harbor_task.subprocess_options(backend_options.get("rootfs")), **backend_options}
        options.setdefault("limits", self.harbor_task.limits)
        row = {"problem_statement": self.harbor_task.instruction, "harbor_task": str(self.harbor_task.path)}
        super().__init__(
            row, backend=backend, workdir=self.harbor_task.workdir, backend_options=backend_options, **options
        )
        self.verdict: HarborVerdict | None = None
        if not self.handle.pool.backend.capabilities.absolute_paths:
            name = self.handle.backend_name
            self.handle.close()
            raise InvalidRequest(
                f"Harbor tasks need real absolute paths (/tests, /logs/verifier) and the {name} sandboxes here have "
                "no root filesystem of their own: use backend='docker', or subprocess with a root filesystem",
                backend=name,
            )

    @staticmethod
    def from_dict(info: dict[str, Any] | str) -> HarborEnv:  # type: ignore[override]
        """Build from a row naming the task directory (``task_dir`` or ``harbor_task``) plus env args.

        Raises:
            HarborTaskError: the row names no task, or the task directory is invalid.
        """
        data = json.loads(info) if isinstance(info, str) else dict(info)
        path = data.pop("task_dir", None) or data.pop("harbor_task", None)
        if not path:
            raise HarborTaskError("the row names no Harbor task: give 'task_dir' (a task directory)")
        allowed = ("backend", "timeout", "max_output_chars", "limits", "deadline_s", "pool_options", "backend_options")
        return HarborEnv(str(path), **{k: data[k] for k in allowed if k in data})

    def solve(self) -> str:
        """Run the task's reference solution in this episode's sandbox (Harbor's oracle); returns its output.

        Then ``submit`` (or ``compute_final_reward``) grades it: a task whose oracle does not
        reach 1.0 is broken.

        Raises:
            HarborTaskError: the task has no ``solution/solve.sh``.
            SandboxError: there is no open sandbox, or it failed.
        """
        session = self._session_or_fail()
        result = self._call(lambda _p: self.harbor_task.solve(session))
        return str(result.stdout + result.stderr)

    def _grade(self) -> float:
        session = self._session
        if session is None:
            self.verdict = HarborVerdict(None, status="infra_error", detail="the episode has no sandbox")
        else:
            try:
                self.verdict = self._call(lambda _p: verify_session(self.harbor_task, session))
            except SandboxkitError as exc:
                self.verdict = HarborVerdict(None, status="infra_error", detail=str(exc))
        verdict = self.verdict
        self.final_info = {
            "reward_status": verdict.status,
            "reward": verdict.reward,
            "rewards": verdict.rewards,
            "infra_error": verdict.status == "infra_error",
            "verifier_exit_code": verdict.exit_code,
        }
        if verdict.detail:
            self.final_info["error"] = verdict.detail
        return verdict.reward if verdict.reward is not None else 0.0


class HarborToolEnv:
    """A Harbor task as a TRL ``GRPOTrainer(environment_factory=HarborToolEnv)`` environment.

    TRL builds a few instances, calls ``reset(**row)`` before each rollout (the row names the
    task: ``task_dir``), exposes every public method but ``reset`` / ``get_reward`` as a tool
    (here only ``bash``), and calls ``get_reward()`` once the rollout ends. The reward is the
    task's verifier's; ``None`` (which TRL treats as "no reward") when there is none to trust.
    Each rollout gets a fresh sandbox; ``reset`` releases the previous one.

    Args:
        backend: as :class:`HarborEnv` (``"docker"`` by default).
        **options: :class:`HarborEnv` options (``timeout``, ``pool_options``...).
    """

    def __init__(self, backend: BackendLike = "docker", **options: Any) -> None:
        self._backend = backend
        self._options = options
        self._env: HarborEnv | None = None
        self._tasks: dict[str, HarborTask] = {}

    def reset(self, task_dir: str | None = None, **_: Any) -> str:
        """Open a sandbox for the row's task and return its instruction (TRL appends it to the prompt).

        Raises:
            HarborTaskError: the row names no task, or the task directory is invalid.
        """
        if not task_dir:
            raise HarborTaskError("the row names no Harbor task: give a 'task_dir' column")
        self._release()
        task = self._tasks.get(str(task_dir)) or self._tasks.setdefault(str(task_dir), HarborTask.load(task_dir))
        self._env = HarborEnv(task, backend=self._backend, **self._options)
        observation, _ = self._env.reset()
        return observation

    def bash(self, command: str) -> str:
        """
        Run a shell command in the task's sandbox, in its working directory, and return its output.

        Args:
            command: The shell command to run.

        Returns:
            The command's output and exit code.
        """
        if self._env is None:
            return "Error: no task is open; the trainer calls reset() first."
        observation, *_ = self._env.step({"name": "execute_bash", "arguments": {"command": command}})
        return str(observation)

    def get_reward(self) -> float | None:
        """The verifier's reward for this rollout (computed once), or ``None`` when there is none."""
        if self._env is None:
            return None
        self._env.compute_final_reward()
        reward = self._env.final_info.get("reward")
        self._release()
        return float(reward) if reward is not None else None

    def _release(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            env.close()
