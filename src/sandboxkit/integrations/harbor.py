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

:class:`HarborTask` reads one; :func:`verify_session` grades an agent's working directory the
way Harbor's verifier does (tests uploaded to ``/tests``, ``test.sh`` run with the verifier's
timeout and environment, the reward file read back), but in a fresh sandbox of the task's image,
out of the agent's reach; :class:`HarborEnv` is an rLLM environment on it and
:class:`HarborToolEnv` a TRL ``environment_factory``. (Loading lives in ``_harbor_task``,
verifying in ``_harbor_verify``, carrying the workspace across in ``_harbor_workspace``.)

Blame: what the agent can cause is its outcome. A reward file that is missing, empty or not a
number and a verifier that times out score 0.0 (``status`` says which); ``reward=None`` (no
reward) is only for a sandbox that failed, which the agent cannot cause.

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
from sandboxkit.integrations._harbor_verify import (
    HarborVerdict,
    parse_reward_files,
    verify_session,
    verify_workspace,
)
from sandboxkit.integrations._harbor_workspace import STEP_TIMEOUT_S, WorkspaceUnreadable, capture_workspace
from sandboxkit.integrations._runtime import GRACE_S, BackendLike
from sandboxkit.integrations.rllm import SandboxEnv

__all__ = [
    "HarborEnv",
    "HarborTask",
    "HarborTaskError",
    "HarborToolEnv",
    "HarborVerdict",
    "parse_reward_files",
    "verify_session",
    "verify_workspace",
]

log = logging.getLogger(__name__)


class HarborEnv(SandboxEnv):
    """An rLLM environment on a Harbor task: the agent works in the task's image, ``test.sh`` grades it.

    The observation at reset is ``instruction.md``; the tools are :class:`SandboxEnv`'s
    (``execute_bash``, ``str_replace_editor``, ``submit``), run in the task's working
    directory. The final reward is the verifier's; ``final_info`` holds the whole
    :class:`HarborVerdict` (``reward`` is ``None`` only when a sandbox failed: ``compute_final_reward``
    then returns 0.0 with ``infra_error`` set). With ``stateful_python=True`` the agent also gets a
    Python kernel; it is closed with the agent's sandbox before the verifier starts.

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
        self.verdict = self._verify()
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

    def _verify(self) -> HarborVerdict:
        """Carry the workspace out, close the agent's sandbox (its processes and kernels with it), then verify.

        The agent's sandbox is gone before ``test.sh`` starts, so nothing it left running can
        compete with the verifier for the CPU or touch its files (they are in another sandbox
        anyway); see :mod:`sandboxkit.integrations._harbor_verify`.
        """
        session = self._session
        if session is None:
            return HarborVerdict(None, status="infra_error", detail="the episode has no sandbox")
        task = self.harbor_task
        # Verification may take the verifier's whole timeout on top of carrying the workspace.
        budget = max(self.deadline_s, task.verifier_timeout_s + 2 * STEP_TIMEOUT_S) + GRACE_S
        try:
            copy = self.handle.call(lambda _p: capture_workspace(session, task.workdir), budget)
        except WorkspaceUnreadable as exc:
            return HarborVerdict(0.0, status="workspace_unreadable", detail=str(exc))
        except SandboxkitError as exc:
            return HarborVerdict(None, status="infra_error", detail=str(exc))
        finally:
            self._release()
        try:
            verdict: HarborVerdict = self.handle.call(
                lambda p: verify_workspace(task, p, copy, limits=self.limits), budget
            )
        except SandboxkitError as exc:
            return HarborVerdict(None, status="infra_error", detail=str(exc))
        return verdict


class HarborToolEnv:
    """A Harbor task as a TRL ``GRPOTrainer(environment_factory=HarborToolEnv)`` environment.

    TRL builds a few instances, calls ``reset(**row)`` before each rollout (the row names the
    task: ``task_dir``), exposes every public method but ``reset`` / ``get_reward`` as a tool
    (here only ``bash``), and calls ``get_reward()`` once the rollout ends. The reward is the
    task's verifier's; ``None`` (which TRL treats as "no reward") only when a sandbox failed.
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
        """The verifier's reward for this rollout (computed once), or ``None`` when a sandbox failed."""
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
