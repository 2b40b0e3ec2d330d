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
environment, the reward file read back); :class:`HarborEnv` is an rLLM environment on it.

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
import math
import posixpath
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.integrations._runtime import BackendLike
from sandboxkit.integrations.rllm import SandboxEnv
from sandboxkit.models import Limits
from sandboxkit.session import Session

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["HarborEnv", "HarborTask", "HarborTaskError", "HarborToolEnv", "HarborVerdict", "verify_session"]

log = logging.getLogger(__name__)

TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
VERIFIER_DIR = "/logs/verifier"
REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
TEST_STDOUT = "/logs/verifier/test-stdout.txt"
#: The working directory when neither task.toml nor the Dockerfile names one (Terminal-Bench's).
DEFAULT_WORKDIR = "/app"
#: Harbor's default verifier timeout (``[verifier] timeout_sec``).
DEFAULT_VERIFIER_TIMEOUT_S = 600.0

_WORKDIR_LINE = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)


class HarborTaskError(ValueError):
    """A task directory is not a valid Harbor task; the message names the file and the fix."""


@dataclass(frozen=True)
class HarborVerdict:
    """What verifying one sandbox gave.

    Attributes:
        reward: the reward (``reward.txt``'s number, or ``reward.json``'s ``"reward"`` key or
            only value); ``None`` when there is none to trust (see ``status``).
        rewards: every number ``reward.json`` holds (``{"reward": x}`` for ``reward.txt``).
        status: ``"ok"``, ``"no_reward_file"``, ``"empty_reward_file"``, ``"bad_reward_file"``,
            ``"verifier_timeout"`` or ``"infra_error"``.
        exit_code: ``test.sh``'s exit status (Harbor ignores it; the reward file decides).
        output: the tail of ``test.sh``'s output (``/logs/verifier/test-stdout.txt``).
        detail: why there is no reward, when there is none.
        duration_s: how long verification took.
    """

    reward: float | None
    rewards: dict[str, float] = field(default_factory=dict)
    status: str = "ok"
    exit_code: int | None = None
    output: str = ""
    detail: str = ""
    duration_s: float = 0.0


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task directory, read and checked.

    Build with :meth:`load`. ``image`` is ``[environment].docker_image``; when it is ``None``
    the task brings ``environment/Dockerfile`` and :meth:`build_image` builds it.
    """

    path: Path
    name: str
    instruction: str
    config: dict[str, Any]
    image: str | None
    dockerfile: Path | None
    workdir: str
    tests: dict[str, bytes]
    verifier_timeout_s: float
    verifier_env: dict[str, str]
    agent_timeout_s: float | None
    limits: Limits

    @classmethod
    def load(cls, path: str | Path) -> HarborTask:
        """Read a task directory.

        Raises:
            HarborTaskError: a required file is missing or malformed (the message says which).
        """
        root = Path(path).resolve()
        if not root.is_dir():
            raise HarborTaskError(f"{str(path)!r} is not a directory; give a Harbor task directory")
        instruction_path, config_path = root / "instruction.md", root / "task.toml"
        if not instruction_path.is_file():
            raise HarborTaskError(f"{instruction_path} is missing; a Harbor task states its instruction there")
        try:
            config = tomllib.loads(config_path.read_text()) if config_path.is_file() else {}
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise HarborTaskError(f"{config_path} is not valid TOML: {exc}") from exc
        environment = _table(config, "environment", config_path)
        verifier = _table(config, "verifier", config_path)
        agent = _table(config, "agent", config_path)
        image = environment.get("docker_image")
        dockerfile = root / "environment" / "Dockerfile"
        if image is None and not dockerfile.is_file():
            raise HarborTaskError(
                f"{root} has neither [environment] docker_image in task.toml nor environment/Dockerfile; add one"
            )
        tests = _read_tests(root / "tests")
        return cls(
            path=root,
            name=str(_table(config, "task", config_path).get("name") or root.name),
            instruction=instruction_path.read_text(encoding="utf-8"),
            config=config,
            image=str(image) if image else None,
            dockerfile=dockerfile if dockerfile.is_file() else None,
            workdir=_workdir(environment, dockerfile if dockerfile.is_file() else None, config_path),
            tests=tests,
            verifier_timeout_s=_seconds(verifier.get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S), config_path),
            verifier_env={str(k): str(v) for k, v in dict(verifier.get("env") or {}).items()},
            agent_timeout_s=_seconds(agent["timeout_sec"], config_path) if agent.get("timeout_sec") else None,
            limits=_limits(environment, config_path),
        )

    def image_tag(self) -> str:
        """The tag :meth:`build_image` gives this task's Dockerfile build (content-addressed)."""
        import hashlib

        assert self.dockerfile is not None
        digest = hashlib.sha256()
        for item in sorted(self.dockerfile.parent.rglob("*")):
            if item.is_file():
                digest.update(str(item.relative_to(self.dockerfile.parent)).encode() + b"\0" + item.read_bytes())
        slug = re.sub(r"[^a-z0-9_.-]+", "-", self.name.lower()).strip("-.") or "task"
        return f"sandboxkit-harbor-{slug}:{digest.hexdigest()[:16]}"

    def build_image(self, *, timeout_s: float = 1800.0) -> str:
        """The image to run: ``docker_image``, or ``environment/Dockerfile`` built once and cached by content.

        Raises:
            SandboxError: ``docker build`` failed or is not available (the message has its output tail).
        """
        if self.image:
            return self.image
        if self.dockerfile is None:
            raise HarborTaskError(f"Harbor task {self.name!r} names no image and has no environment/Dockerfile")
        tag = self.image_tag()
        try:
            if subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0:
                return tag
            built = subprocess.run(
                ["docker", "build", "-q", "-t", tag, "--label", "sandboxkit=harbor", str(self.dockerfile.parent)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(
                f"building the image of Harbor task {self.name!r} failed: {exc}", backend="docker"
            ) from exc
        if built.returncode != 0:
            raise SandboxError(
                f"docker build of Harbor task {self.name!r} failed (exit {built.returncode}): {built.stderr[-800:]}",
                backend="docker",
            )
        return tag

    def docker_options(self) -> dict[str, Any]:
        """Docker backend options for this task: its image and the absolute directories Harbor writes."""
        dirs = dict.fromkeys([self.workdir, "/logs/agent", VERIFIER_DIR, "/logs/artifacts"])
        return {"image": self.build_image(), "writable_root": True, "writable_dirs": tuple(dirs)}

    def rootfs_tarball(self, cache_dir: str | Path | None = None, *, timeout_s: float = 1800.0) -> str:
        """The task's image as a root filesystem tarball (``docker export``), made once per image id.

        The subprocess backend runs it without Docker (``rootfs=``); Docker is needed only here,
        to build or find the image and export it.

        Raises:
            SandboxError: Docker could not build, find or export the image.
        """
        image = self.build_image(timeout_s=timeout_s)
        folder = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "sandboxkit" / "harbor"
        try:
            found = subprocess.run(
                ["docker", "image", "inspect", "-f", "{{.Id}}", image], capture_output=True, text=True, timeout=60
            )
            if found.returncode != 0:
                pulled = subprocess.run(["docker", "pull", image], capture_output=True, text=True, timeout=timeout_s)
                found = subprocess.run(
                    ["docker", "image", "inspect", "-f", "{{.Id}}", image], capture_output=True, text=True, timeout=60
                )
                if found.returncode != 0:
                    raise SandboxError(f"image {image!r} is not here and could not be pulled: {pulled.stderr[-400:]}")
            path = folder / f"harbor-{found.stdout.strip().split(':')[-1][:16]}.tar"
            if path.is_file():
                return str(path)
            folder.mkdir(parents=True, exist_ok=True)
            created = subprocess.run(
                ["docker", "create", "--label", "sandboxkit=harbor-export", image, "true"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if created.returncode != 0:
                raise SandboxError(f"docker create {image!r} failed: {created.stderr[-400:]}")
            container = created.stdout.strip()
            partial = path.with_suffix(f".tar.{time.monotonic_ns()}")
            try:
                exported = subprocess.run(
                    ["docker", "export", "-o", str(partial), container],
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                )
                if exported.returncode != 0:
                    raise SandboxError(f"docker export of {image!r} failed: {exported.stderr[-400:]}")
                partial.replace(path)
            finally:
                partial.unlink(missing_ok=True)
                subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"exporting the image of Harbor task {self.name!r} failed: {exc}") from exc
        return str(path)

    def subprocess_options(self, rootfs: str | None = None) -> dict[str, Any]:
        """Subprocess backend options for this task: its image as the root filesystem, its working directory."""
        return {"rootfs": rootfs or self.rootfs_tarball(), "workdir": self.workdir}

    async def verify(self, session: Session) -> HarborVerdict:
        """Grade the sandbox of ``session`` as Harbor's verifier does; see :func:`verify_session`."""
        return await verify_session(self, session)


async def verify_session(task: HarborTask, session: Session) -> HarborVerdict:
    """Upload ``tests/`` to ``/tests``, run ``/tests/test.sh``, read ``/logs/verifier/reward.{json,txt}``.

    Never raises for what the sandbox or the task's files do: a missing or malformed reward
    file, a verifier timeout and an infrastructure failure are verdicts with ``reward=None``.

    Raises:
        InvalidRequest: the session's backend cannot write ``/tests`` (no root filesystem of its own).
    """
    started = time.monotonic()
    if not session.capabilities.absolute_paths:
        raise InvalidRequest(
            "Harbor tasks need real absolute paths (/tests, /logs/verifier): use a backend whose sandboxes have "
            "their own root filesystem (docker, or subprocess with a root filesystem)",
            backend=session.backend_name,
        )

    def verdict(reward: float | None, status: str, **kw: Any) -> HarborVerdict:
        return HarborVerdict(reward, status=status, duration_s=time.monotonic() - started, **kw)

    try:
        # The agent may have written there: only what test.sh writes now counts.
        # (The agent runs as the same user, so whatever it left there can be made writable and removed.)
        cleared = await session.exec(
            f"mkdir -p {VERIFIER_DIR} && chmod -R u+rwX {VERIFIER_DIR} && "
            f"rm -rf {VERIFIER_DIR}/* {VERIFIER_DIR}/.[!.]* {VERIFIER_DIR}/..?* && "
            f'[ -z "$(ls -A {VERIFIER_DIR})" ]',
            timeout=60,
        )
        if not cleared.ok:
            return verdict(None, "infra_error", detail=f"could not empty {VERIFIER_DIR}: {cleared.stderr[-300:]}")
        await session.write_files({posixpath.join(TESTS_DIR, rel): body for rel, body in task.tests.items()})
        result = await session.exec(
            f"chmod +x {TESTS_DIR}/test.sh && {TESTS_DIR}/test.sh > {TEST_STDOUT} 2>&1",
            cwd=task.workdir,
            env=task.verifier_env or None,
            timeout=task.verifier_timeout_s,
        )
        files = await session.read_files([REWARD_JSON, REWARD_TXT, TEST_STDOUT])
    except SandboxError as exc:
        if isinstance(exc, InvalidRequest):
            raise
        return verdict(None, "infra_error", detail=str(exc))
    output = files.get(TEST_STDOUT, b"")[-4000:].decode("utf-8", errors="replace")
    common = {"exit_code": result.exit_code, "output": output}
    if result.status.value == "timeout":
        return verdict(None, "verifier_timeout", detail=f"test.sh ran past {task.verifier_timeout_s:g}s", **common)
    reward, rewards, status, detail = parse_reward_files(files.get(REWARD_JSON), files.get(REWARD_TXT))
    return verdict(reward, status, rewards=rewards, detail=detail, **common)


def parse_reward_files(
    reward_json: bytes | None, reward_txt: bytes | None
) -> tuple[float | None, dict[str, float], str, str]:
    """Harbor's reading of the verifier's output: ``reward.json`` first, then ``reward.txt``.

    Returns:
        ``(reward, rewards, status, detail)``; ``reward`` is ``None`` unless the file holds a
        finite number (``reward.json``: its ``"reward"`` key, or its only value).
    """
    if reward_json is not None:
        name, raw = "reward.json", reward_json
    elif reward_txt is not None:
        name, raw = "reward.txt", reward_txt
    else:
        return None, {}, "no_reward_file", f"test.sh wrote neither {REWARD_JSON} nor {REWARD_TXT}"
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None, {}, "empty_reward_file", f"{name} is empty"
    try:
        if name == "reward.txt":
            rewards = {"reward": float(text)}
        else:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            rewards = {str(k): float(v) for k, v in data.items() if not isinstance(v, bool)}
            if len(rewards) != len(data):
                raise ValueError("a value is not a number")
    except (ValueError, TypeError) as exc:
        return None, {}, "bad_reward_file", f"{name} does not hold numbers ({exc}): {text[:200]!r}"
    if not all(math.isfinite(v) for v in rewards.values()):
        return None, {}, "bad_reward_file", f"{name} holds a non-finite number: {text[:200]!r}"
    if "reward" in rewards:
        return rewards["reward"], rewards, "ok", ""
    if len(rewards) == 1:
        return next(iter(rewards.values())), rewards, "ok", ""
    return None, rewards, "bad_reward_file", f"{name} has several rewards and none is named 'reward'"


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

    def _grade(self) -> float:
        session = self._session
        if session is None:
            self.verdict = HarborVerdict(None, status="infra_error", detail="the episode has no sandbox")
        else:
            try:
                self.verdict = self._call(lambda _p: verify_session(self.harbor_task, session))
            except SandboxError as exc:
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


def _table(config: Mapping[str, Any], name: str, where: Path) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise HarborTaskError(f"{where}: [{name}] must be a table")
    return value


def _seconds(value: Any, where: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise HarborTaskError(f"{where}: timeout_sec must be a positive number of seconds, got {value!r}")
    return float(value)


def _read_tests(tests_dir: Path) -> dict[str, bytes]:
    if not (tests_dir / "test.sh").is_file():
        raise HarborTaskError(f"{tests_dir / 'test.sh'} is missing; Harbor grades a task by running it")
    out: dict[str, bytes] = {}
    for item in sorted(tests_dir.rglob("*")):
        if item.is_symlink():
            raise HarborTaskError(f"{item} is a symbolic link; tests/ must hold regular files")
        if item.is_file():
            out[item.relative_to(tests_dir).as_posix()] = item.read_bytes()
    return out


def _workdir(environment: Mapping[str, Any], dockerfile: Path | None, where: Path) -> str:
    workdir = environment.get("workdir")
    if workdir is None and dockerfile is not None:
        found = _WORKDIR_LINE.findall(dockerfile.read_text(encoding="utf-8", errors="replace"))
        workdir = found[-1] if found else None
    workdir = str(workdir or DEFAULT_WORKDIR)
    if not workdir.startswith("/") or ".." in workdir.split("/"):
        raise HarborTaskError(f"{where}: the working directory must be an absolute path, got {workdir!r}")
    return posixpath.normpath(workdir)


def _size_mb(value: Any, where: Path) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*", str(value), re.IGNORECASE)
    if not match:
        raise HarborTaskError(f"{where}: a size must be like '2G' or a number of MiB, got {value!r}")
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2).upper()]
    return max(1, int(float(match.group(1)) * scale))


def _limits(environment: Mapping[str, Any], where: Path) -> Limits:
    memory = _size_mb(environment.get("memory_mb", environment.get("memory")), where)
    cpus = environment.get("cpus")
    network = environment.get("allow_internet")
    try:
        return Limits().merged(
            memory_mb=memory,
            cpus=float(cpus) if cpus else None,
            network=bool(network) if network is not None else None,
        )
    except ValueError as exc:
        raise HarborTaskError(f"{where}: invalid [environment] resources: {exc}") from exc
