"""``HarborTask``: one Harbor task directory, read, checked and turned into an image or a root filesystem.

The layout (``harbor/models/task/paths.py``, ``config.py``): ``instruction.md``, ``task.toml``
(``[environment]`` docker_image / workdir / cpus / memory / allow_internet, ``[verifier]``
timeout_sec / env, ``[agent]`` timeout_sec), ``environment/Dockerfile`` when no image is named,
``tests/test.sh``. Everything is checked when the task is loaded, so a broken task fails
before a sandbox is opened, with the file and the fix in the message.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxkit.errors import SandboxError
from sandboxkit.integrations._harbor_verify import VERIFIER_DIR, HarborVerdict, verify_session
from sandboxkit.models import ExecResult, Limits
from sandboxkit.session import Session

if TYPE_CHECKING:
    from sandboxkit.pool import SandboxPool

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["DEFAULT_WORKDIR", "HarborTask", "HarborTaskError"]

#: The working directory when neither task.toml nor the Dockerfile names one (Terminal-Bench's).
DEFAULT_WORKDIR = "/app"
#: Harbor's default verifier timeout (``[verifier] timeout_sec``).
DEFAULT_VERIFIER_TIMEOUT_S = 600.0

_WORKDIR_LINE = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)


class HarborTaskError(ValueError):
    """A task directory is not a valid Harbor task; the message names the file and the fix."""


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
    solution: dict[str, bytes]
    solution_env: dict[str, str]
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
            solution=_read_dir(root / "solution") if (root / "solution" / "solve.sh").is_file() else {},
            solution_env={
                str(k): str(v) for k, v in dict(_table(config, "solution", config_path).get("env") or {}).items()
            },
            verifier_timeout_s=_seconds(verifier.get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S), config_path),
            verifier_env={str(k): str(v) for k, v in dict(verifier.get("env") or {}).items()},
            agent_timeout_s=_seconds(agent["timeout_sec"], config_path) if agent.get("timeout_sec") else None,
            limits=_limits(environment, config_path),
        )

    def image_tag(self) -> str:
        """The tag :meth:`build_image` gives this task's Dockerfile build (content-addressed)."""

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

    async def solve(self, session: Session) -> ExecResult:
        """Run the reference solution in the sandbox, as Harbor's oracle agent does (to check a task is solvable).

        ``solution/`` goes to ``/solution`` and ``/solution/solve.sh`` runs in the working
        directory with ``[solution] env``, bounded by ``[agent] timeout_sec`` (else the verifier's).

        Raises:
            HarborTaskError: the task has no ``solution/solve.sh``.
            SandboxError: the sandbox failed.
        """
        if not self.solution:
            raise HarborTaskError(f"Harbor task {self.name!r} has no solution/solve.sh")
        await session.write_files({posixpath.join("/solution", rel): body for rel, body in self.solution.items()})
        return await session.exec(
            "chmod +x /solution/solve.sh && /solution/solve.sh",
            cwd=self.workdir,
            env={"DEBIAN_FRONTEND": "noninteractive", **self.solution_env},
            timeout_s=self.agent_timeout_s or self.verifier_timeout_s,
        )

    async def verify(self, session: Session, pool: SandboxPool) -> HarborVerdict:
        """Grade the working directory of ``session`` (from ``pool``) as Harbor's verifier does, in a fresh
        sandbox of ``pool``; see :func:`~sandboxkit.integrations._harbor_verify.verify_session`."""
        return await verify_session(self, session, pool)


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
    return _read_dir(tests_dir)


def _read_dir(tests_dir: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for item in sorted(tests_dir.rglob("*")):
        if item.is_symlink():
            raise HarborTaskError(f"{item} is a symbolic link; {tests_dir.name}/ must hold regular files")
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
    workdir = posixpath.normpath(workdir)
    # The workdir is what the verifier's sandbox takes from the agent's: it must not hold the verifier's own files.
    for guarded in ("/tests", "/logs", "/solution"):
        if (
            workdir == "/"
            or workdir == guarded
            or workdir.startswith(guarded + "/")
            or guarded.startswith(workdir + "/")
        ):
            raise HarborTaskError(
                f"{where}: the working directory {workdir!r} overlaps {guarded}, which the verifier owns; "
                "use a directory of its own such as /app"
            )
    return workdir


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
