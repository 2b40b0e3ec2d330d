"""A Harbor environment provider on sandboxkit: ``harbor run`` with sandboxkit's Docker or subprocess sandboxes.

Harbor (``pip install harbor``, Python >= 3.12) runs a task by starting an environment (a
``harbor.environments.base.BaseEnvironment``), letting an agent ``exec`` in it, uploading
``tests/`` and running ``test.sh``, then reading ``/logs/verifier/reward.*`` back. Any class
of that shape can be named on the command line::

    harbor run -p path/to/task -a oracle \\
        --env sandboxkit.integrations.harbor_environment:SandboxkitEnvironment \\
        --ek backend=subprocess            # or backend=docker (the default)

Each trial gets one sandboxkit session: the task's image on Docker, or the same image as a
root filesystem on the subprocess backend (``docker export``\\ ed once, or ``--ek rootfs=PATH``
to a tarball or directory, which needs no Docker at all). Image building, exporting and the
task's limits come from :class:`~sandboxkit.integrations.harbor.HarborTask`.

The verifier runs out of the agent's reach (``--ek verifier=fresh``, the default): when Harbor
uploads ``/tests``, the agent's working directory is carried into a fresh sandbox of the image
and the agent's sandbox is closed, so a planted reward file, a ``cat`` shadowed on ``PATH`` or
a process left behind cannot decide the reward. ``--ek verifier=shared`` keeps Harbor's own
behaviour (verifier in the agent's sandbox) for tasks that grade state outside the working
directory.

Blame (docs/agent_environments.md): a command's failure, timeout or memory kill is a return
code the agent sees; the sandbox failing in a way the agent cannot cause (it cannot start, the
backend is gone, it dies during a call) raises :class:`SandboxkitEnvironmentError`, which
Harbor records as the trial's exception with no reward, never as reward 0.

This module imports ``harbor``; sandboxkit itself never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

from sandboxkit.errors import InvalidRequest, SandboxkitError, SandboxLost
from sandboxkit.integrations._harbor_task import HarborTask
from sandboxkit.integrations._harbor_transfer import download_tree, upload_tree
from sandboxkit.integrations._harbor_verify import TESTS_DIR, VERIFIER_DIR
from sandboxkit.integrations._harbor_workspace import (
    WorkspaceCopy,
    WorkspaceUnreadable,
    capture_workspace,
    restore_workspace,
)
from sandboxkit.models import Limits, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["SandboxkitEnvironment", "SandboxkitEnvironmentError"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Backends whose sandboxes have the real absolute paths (/tests, /logs/verifier) a Harbor task needs.
BACKENDS = ("docker", "subprocess")
#: Where the verifier runs: a fresh sandbox holding the agent's working directory, or the agent's own.
VERIFIER_MODES = ("fresh", "shared")
#: A command's limit when Harbor gives none (Harbor bounds the agent and verifier phases itself).
DEFAULT_COMMAND_TIMEOUT_S = 3600.0
#: Where a command's stop file goes (see :meth:`SandboxkitEnvironment._stop`), and how long stopping may take.
STOP_PREFIX, STOP_GRACE_S = "/.sandboxkit-harbor-stop-", 30.0
#: Runs Harbor's command ($1) in a process group of its own, killed when the stop file ($2) appears.
_STOPPABLE = (
    'set -m; bash -c "$1" & pid=$!; set +m; '
    'while kill -0 "$pid" 2>/dev/null; do [ -e "$2" ] && { kill -9 -- "-$pid" 2>/dev/null; break; }; sleep 0.2; done; '
    'wait "$pid" 2>/dev/null; rc=$?; rm -f "$2" 2>/dev/null; exit $rc'
)
#: Exit codes the agent sees for what sandboxkit stopped (those of ``timeout(1)`` and of SIGKILL).
TIMEOUT_EXIT, KILLED_EXIT = 124, 137
#: Users a command may ask for: the sandbox's own (root in its image, where Harbor's setup commands ask for it).
_SANDBOX_USERS = (None, "root", 0, "0")


class SandboxkitEnvironmentError(RuntimeError):
    """The sandbox failed in a way the agent cannot cause; Harbor records it as the trial's exception."""


class SandboxkitEnvironment(BaseEnvironment):
    """Harbor's ``BaseEnvironment`` on one sandboxkit session (see the module docstring).

    Options (``--ek key=value``):
        backend: ``"docker"`` (default) or ``"subprocess"`` (the image as a root filesystem).
        rootfs: for ``subprocess``, a root filesystem (tarball or directory) to use instead of
            exporting the task's image (then no Docker is needed).
        verifier: ``"fresh"`` (default): when Harbor's verifier starts (it uploads ``/tests``),
            the agent's working directory is carried into a fresh sandbox of the image and the
            verifier runs there, out of the agent's reach; ``"shared"``: in the agent's sandbox,
            as Harbor's own providers do (for tasks that grade state outside the working directory).
    """

    def __init__(
        self,
        *args: Any,
        backend: str = "docker",
        rootfs: str | None = None,
        verifier: str = "fresh",
        **kwargs: Any,
    ) -> None:
        self._backend_name = backend
        self._rootfs = rootfs
        self._verifier_mode = verifier
        #: The verifier's fresh sandbox replaced the agent's (once per trial).
        self.verifying = False
        self._pool: SandboxPool | None = None
        self._session: Session | None = None
        self._broken: str | None = None
        #: Commands that came back in the current sandbox: a crash after one may be the agent's doing.
        self._returned = 0
        #: Times the trial went on in a fresh sandbox after its sandbox was found dead between calls.
        self.state_lost = 0
        super().__init__(*args, **kwargs)

    @property
    def sandbox_id(self) -> str | None:
        """Id of the sandbox the trial's commands run in now (a container id on Docker), for logs."""
        return self._session.sandbox_id if self._session is not None else None

    @staticmethod
    def type() -> str:
        """Harbor's name for this provider (it appears in the job's config and results)."""
        return "sandboxkit"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        """No network unless the task allows it (sandboxkit's default); no GPUs, mounts or SSH streaming."""
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        """Read the task (``environment_dir`` is its ``environment/``) and check the backend, before any start.

        Raises:
            HarborTaskError: the task directory is not a valid Harbor task.
            ValueError: the backend is not one with real absolute paths.
        """
        if self._verifier_mode not in VERIFIER_MODES:
            raise ValueError(f"verifier={self._verifier_mode!r}: use one of {VERIFIER_MODES}")
        if self._backend_name not in BACKENDS:
            raise ValueError(
                f"backend={self._backend_name!r}: a Harbor task needs real absolute paths; use one of {BACKENDS}"
            )
        environment_dir = Path(self.environment_dir)
        task = HarborTask.load(environment_dir.parent)
        # The image is the one Harbor asks for: the task's, or a separate verifier's (tests/Dockerfile).
        config = self.task_env_config
        dockerfile = environment_dir / "Dockerfile"
        self._task = replace(
            task,
            image=config.docker_image or None,
            dockerfile=dockerfile if dockerfile.is_file() else None,
            workdir=config.workdir or task.workdir,
        )
        if self._task.image is None and self._task.dockerfile is None:
            raise FileNotFoundError(f"{environment_dir} has no Dockerfile and the task names no docker_image")

    def _limits(self) -> Limits:
        """The task's limits, with Harbor's overrides (``--override-cpus`` / ``--override-memory-mb``)."""
        config = self.task_env_config
        return self._task.limits.merged(
            cpus=config.cpus,
            memory_mb=config.memory_mb,
            network=self.network_policy.network_mode.value == "public",
            timeout_s=DEFAULT_COMMAND_TIMEOUT_S,
        )

    async def start(self, force_build: bool) -> None:
        """Build or find the task's image (exported as a root filesystem for ``subprocess``), open the sandbox.

        Raises:
            SandboxkitEnvironmentError: the image could not be built or exported, or the sandbox did not start.
        """
        task = self._task
        try:
            if self._backend_name == "docker":
                options = await asyncio.to_thread(task.docker_options)
            else:
                options = await asyncio.to_thread(task.subprocess_options, self._rootfs)
            self._pool = SandboxPool(
                self._backend_name,
                backend_options=options,
                max_concurrency=4,
                max_sandboxes=2,
                handle_signals=False,
                limits=self._limits(),
            )
            self._session = self._pool.session()
            await self._session.open()
        except SandboxkitError as exc:
            self._broken = f"the {self._backend_name} sandbox did not start: {exc}"
            raise SandboxkitEnvironmentError(self._broken) from exc
        dirs = ["/logs/agent", "/logs/verifier", "/logs/artifacts", task.workdir]
        await self.exec("mkdir -p " + " ".join(dirs))

    async def stop(self, delete: bool) -> None:
        """Close the sandbox and the pool (a sandbox is never kept after its trial, whatever ``delete`` says)."""
        session, pool, self._session, self._pool = self._session, self._pool, None, None
        try:
            if session is not None:
                await session.close()
        finally:
            if pool is not None:
                await pool.aclose()

    async def _call(self, what: str, fn: Callable[[Session], Awaitable[T]]) -> T:
        """Run ``fn`` on the session; the sandbox's own failures become :class:`SandboxkitEnvironmentError`.

        A sandbox found dead *before* a call sent it anything (``SandboxLost``) after a command
        of this trial came back in it is taken as the trial's doing (what a program started may
        have killed it): nothing of the call ran, so the session opens a fresh sandbox of the
        image and ``fn`` runs there once, on the state the image has. A sandbox that dies
        *during* a call (``SandboxCrashed``) is the infrastructure's: a program that kills its
        sandbox gets a result for its own command, not this error.
        """
        if self._broken is not None:
            raise SandboxkitEnvironmentError(self._broken)
        session = self._session
        if session is None:
            raise SandboxkitEnvironmentError(f"{what}: the environment is not started")
        for attempt in range(2):
            try:
                return await fn(session)
            except InvalidRequest:
                raise
            except SandboxLost as exc:
                if attempt == 0 and self._returned > 0:
                    log.warning("%s: the sandbox died after the trial's last command (%s); state lost", what, exc)
                    self._returned = 0
                    self.state_lost += 1
                    continue
                self._broken = f"{what}: the sandbox failed: {exc}"
                raise SandboxkitEnvironmentError(self._broken) from exc
            except SandboxkitError as exc:
                self._broken = f"{what}: the sandbox failed: {exc}"
                raise SandboxkitEnvironmentError(self._broken) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """Run ``command`` with ``bash -c`` (as Harbor's Docker provider does) in the task's working directory.

        What the command does is its result: a timeout is exit 124, a memory or signal kill
        is 128 + the signal (137 when unknown), with sandboxkit's reason on stderr.

        Raises:
            NotImplementedError: ``user`` names a user other than the sandbox's own.
            SandboxkitEnvironmentError: the sandbox failed (see :meth:`_call`).
        """
        user = self._resolve_user(user)
        if user not in _SANDBOX_USERS:
            raise NotImplementedError(
                f"sandboxkit runs a task's commands as its sandbox's user; the task asks for user {user!r}"
            )
        merged = self._merge_env(env)
        timeout_s = float(timeout_sec) if timeout_sec else DEFAULT_COMMAND_TIMEOUT_S
        stop = f"{STOP_PREFIX}{uuid.uuid4().hex}"
        argv = ["bash", "-c", _STOPPABLE, "harbor-exec", command, stop]
        call = asyncio.ensure_future(
            self._call("exec", lambda s: s.exec(argv, cwd=cwd or self._task.workdir, env=merged, timeout_s=timeout_s))
        )
        try:
            result = await asyncio.shield(call)
        except asyncio.CancelledError:
            await self._stop(call, stop)
            raise
        self._returned += 1
        stderr = result.stderr
        if result.exit_code is not None:
            code = result.exit_code
        elif result.status is Status.TIMEOUT:
            code, stderr = TIMEOUT_EXIT, stderr + f"\nsandboxkit: the command timed out after {timeout_s:g} s\n"
        else:
            code = 128 + result.signal if result.signal else KILLED_EXIT
            stderr += f"\nsandboxkit: the command was stopped ({result.status.value})\n"
        return ExecResult(stdout=result.stdout, stderr=stderr, return_code=code)

    async def _stop(self, call: asyncio.Future[Any], stop: str) -> None:
        """Harbor cancelled a command (its agent timeout): stop that command, keep the sandbox and its files.

        Cancelling a sandboxkit call discards its sandbox (its state is unknown), which would
        leave Harbor's verifier an untouched image: an agent that solved the task and then ran
        past its timeout would score 0 where Harbor's own providers grade what it left. So
        the command runs under a small wrapper (:data:`_STOPPABLE`) that kills its process group
        when a stop file appears, and the file is written with the sandbox's file API, which
        does not wait for the running command (the session's own calls do). Only when that
        fails is the call cancelled, and the sandbox discarded.
        """
        session = self._session
        entry = getattr(session, "_entry", None)  # the sandbox itself: the session serializes calls behind this one
        try:
            if entry is None:
                raise SandboxkitEnvironmentError("the session has no sandbox")
            await asyncio.wait_for(entry.sandbox.write_files({stop: b""}), STOP_GRACE_S)
            await asyncio.wait_for(asyncio.shield(call), STOP_GRACE_S)
        except Exception as exc:  # any failure: fall back to sandboxkit's cancellation, which discards the sandbox
            log.warning("could not stop a cancelled command in place (%s); its sandbox is discarded", exc)
            call.cancel()
            with contextlib.suppress(BaseException):
                await call

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Write one host file into the sandbox (parent folders are created)."""
        body = Path(source_path).read_bytes()
        await self._call("upload_file", lambda s: s.write_files({target_path: body}))

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copy a host directory into the sandbox (empty folders and executable bits kept).

        Harbor's verifier begins by uploading the task's tests to ``/tests``; in ``fresh``
        mode that is when the verifier's sandbox replaces the agent's (:meth:`_hand_to_verifier`).
        """
        if target_dir.rstrip("/") == TESTS_DIR and self._verifier_mode == "fresh" and not self.verifying:
            await self._hand_to_verifier()
        await self._call("upload_dir", lambda s: upload_tree(s, Path(source_dir), target_dir))

    async def _hand_to_verifier(self) -> None:
        """Carry the agent's working directory into a fresh sandbox of the image and close the agent's.

        In the agent's sandbox everything the verifier trusts is the agent's to change (it is
        root in its image on the subprocess backend: it can put a ``cat`` ahead of the image's
        on ``PATH``, or plant files in ``/tests``). What crosses is only the working directory,
        checked as :mod:`~sandboxkit.integrations._harbor_workspace` describes; a workspace
        that cannot be read back (the agent's doing) crosses as an empty one.
        """
        self.verifying = True
        workdir = self._task.workdir
        try:
            copy = await self._call("carrying the workspace", lambda s: capture_workspace(s, workdir))
        except WorkspaceUnreadable as exc:
            log.warning("the agent's workspace could not be carried to the verifier (%s); it starts empty", exc)
            copy = WorkspaceCopy(root=workdir)
        agent_session, pool = self._session, self._pool
        assert agent_session is not None and pool is not None  # _call checked the environment is started
        self._session = pool.session()
        self._returned = 0
        try:
            await agent_session.close()
            await self._session.open()
        except SandboxkitError as exc:
            self._broken = f"the verifier's {self._backend_name} sandbox did not start: {exc}"
            raise SandboxkitEnvironmentError(self._broken) from exc
        await self._call("restoring the workspace", lambda s: restore_workspace(s, copy))
        # An empty verifier directory, whatever the image holds there (as Harbor's verifier expects after its rm).
        await self.exec(f"mkdir -p {VERIFIER_DIR} && rm -f {VERIFIER_DIR}/reward.txt {VERIFIER_DIR}/reward.json")

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Read one sandbox file back to the host (never through a link in the sandbox).

        Raises:
            FileNotFoundError: the sandbox has no regular file there.
        """
        found = await self._call("download_file", lambda s: s.read_files([source_path]))
        if source_path not in found:
            raise FileNotFoundError(f"{source_path} is not a file in the sandbox")
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(found[source_path])

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy the regular files below a sandbox directory to the host (names checked, no links followed)."""
        await self._call("download_dir", lambda s: download_tree(s, source_dir, Path(target_dir)))
