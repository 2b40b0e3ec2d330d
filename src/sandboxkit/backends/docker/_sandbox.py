"""``DockerSandbox``: one hardened container, driven through its runner.

A run is one framed request on the container's attached socket (source code, stdin and the
steps travel in the frame); the runner writes the source, compiles, runs, and answers with
the outputs. Files the caller supplies or fetches go through ``put_archive`` / ``get_archive``.
Every wait on the runner has a host-side deadline (the run's own limits plus a grace): a runner
that does not answer in time is declared dead, and the pool discards the container.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

from sandboxkit._plan import plan
from sandboxkit.backends.docker import _abspath, _engine
from sandboxkit.backends.docker._channel import ChannelClosed, RunnerChannel
from sandboxkit.backends.docker._checks import check_env, check_limits, check_path, utf8
from sandboxkit.backends.docker._fork import ArchiveSnapshot, HeldSandbox, restore_into, take_snapshot
from sandboxkit.backends.docker._kernel import start_kernel
from sandboxkit.backends.docker._results import Blobs, base_env, classify, make_step, split_outputs
from sandboxkit.base import Snapshot
from sandboxkit.errors import InvalidRequest, SandboxCrashed, SandboxError, ToolchainMissing, Transient
from sandboxkit.kernel import Kernel, KernelLink
from sandboxkit.languages import Language
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult, Status, check_sandbox_path
from sandboxkit.streaming import CallbackSandbox, Sinks

__all__ = ["ContainerHost", "DockerSandbox"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_NAME = "docker"
PING_TIMEOUT_S = 5.0
RESET_TIMEOUT_S = 30.0


class ContainerHost(Protocol):
    """What a sandbox reads of its :class:`~._backend.DockerBackend`: the options, the engine, and two services.

    Named here rather than imported: the backend makes sandboxes, so importing it back would make
    the two files a circle (and let a sandbox reach the backend's private state).
    """

    @property
    def client(self) -> Any:
        """The docker SDK client."""
        ...

    image: str
    workdir: str
    workdir_size_mb: int
    grace_s: float
    python_fast: bool
    writable_root: bool
    #: The backend's checkpoints not yet released (a new one joins).
    checkpoints: set[ArchiveSnapshot]

    async def remove(self, container_id: str) -> None:
        """Remove the container and its volume (never raises)."""
        ...


class DockerSandbox(CallbackSandbox):
    """A container whose workspace and files persist across calls until :meth:`close`.

    Created by :meth:`DockerBackend.open`; not constructed directly.
    """

    backend_name = _NAME

    def __init__(
        self,
        backend: ContainerHost,
        container_id: str,
        channel: RunnerChannel,
        limits: Limits,
        volume: str,
        *,
        hello: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = container_id[:12]
        self.container_id = container_id
        self.volume = volume
        self._backend = backend
        self._client = backend.client
        self._channel = channel
        self._limits = limits
        self._applied = (limits.memory_mb, limits.cpus, limits.pids)
        self._workdir = backend.workdir
        self._lock = anyio.Lock()
        self._seq = 0
        self._broken: str | None = None
        self._closed = False
        self._kernel: Kernel | None = None
        self._kernel_python: bool | None = None  # python3 in the image runs the kernel (static runner)
        hello = hello or {}
        #: ``python`` or ``static``: which runner is PID 1 (only the Python one has the Python fast path).
        self.runner = str(hello.get("runner", "python"))
        #: ``exec`` of a command string runs it with bash, or with ``/bin/sh`` in an image without bash.
        self._shell = "bash" if hello.get("bash", True) else "/bin/sh"

    # ----------------------------------------------------------------- plumbing

    def _crashed(self, message: str) -> SandboxCrashed:
        return SandboxCrashed(message, backend=_NAME, sandbox_id=self.id)

    def _break(self, why: str) -> None:
        if self._broken is None:
            self._broken = why
            log.info("docker sandbox %s is unusable: %s", self.id, why)

    async def _call(
        self,
        header: dict[str, Any],
        blobs: Sequence[bytes],
        timeout_s: float,
        sinks: Sinks | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """One request to the runner, under the host-side deadline.

        ``sinks`` (stdout's, stderr's): where the ``{"chunk": 1|2}`` frames a step marked ``live``
        sends before the reply go, as they arrive (streaming).
        """
        async with self._lock:
            return await self._call_locked(header, blobs, timeout_s, sinks)

    async def _call_locked(
        self,
        header: dict[str, Any],
        blobs: Sequence[bytes],
        timeout_s: float,
        sinks: Sinks | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """:meth:`_call` for a caller that holds the lock (and needs the container still between calls)."""
        if self._closed:
            raise self._crashed("the sandbox is closed; open a new one")
        if self._broken is not None:
            raise self._crashed(f"the sandbox is unusable ({self._broken}); open a new one")
        self._seq += 1
        header["id"] = self._seq
        try:
            with anyio.fail_after(timeout_s):
                reply, blob = await self._channel.request(header, blobs)
                while "chunk" in reply and sinks is not None:
                    target = sinks[0] if reply["chunk"] == 1 else sinks[1]
                    if target is not None:
                        target(blob)
                    reply, blob = await self._channel.receive()
        except TimeoutError as exc:
            self._break("runner did not answer")
            raise self._crashed(
                f"the runner did not answer within {timeout_s:g}s (the limits plus a grace); "
                "the container is stuck and will be discarded"
            ) from exc
        except ChannelClosed as exc:
            self._break("runner gone")
            raise self._crashed(f"{exc}; the container died (or was removed) and will be discarded") from exc
        except BaseException:
            self._break("a call was cancelled mid-flight")  # its reply would desync the channel
            raise
        if reply.get("id") != header["id"]:
            self._break("protocol out of sync")
            raise self._crashed(f"runner answered request {reply.get('id')!r}, expected {header['id']!r}")
        if not reply.get("ok"):
            self._break("runner error")
            raise self._crashed(f"the runner failed: {reply.get('error', 'no reason')}")
        return reply, blob

    async def _sdk(self, fn: Callable[..., T], *args: Any) -> T:
        """A docker SDK call in a worker thread, with its errors translated."""
        import docker.errors
        import requests.exceptions

        if self._closed:
            raise self._crashed("the sandbox is closed; open a new one")
        try:
            return await anyio.to_thread.run_sync(fn, self._client, self.container_id, *args)
        except docker.errors.NotFound as exc:
            self._break("container gone")
            raise self._crashed(f"the container vanished: {exc.explanation or exc}") from exc
        except docker.errors.APIError as exc:
            raise self._crashed(f"the Docker engine refused: {exc.explanation or exc}") from exc
        except requests.exceptions.RequestException as exc:
            raise Transient(
                f"talking to the Docker engine failed: {exc}; check that dockerd is healthy",
                backend=_NAME,
                sandbox_id=self.id,
            ) from exc

    async def _ensure_limits(self, limits: Limits) -> None:
        """Apply a request's cgroup limits if they differ from what the container has now."""
        check_limits(limits, self.id)
        if limits.network != self._limits.network:
            state = "on" if self._limits.network else "off"
            raise InvalidRequest(
                f"this sandbox was opened with network {state} and Docker cannot switch it per run "
                f"(requested network={limits.network!r}); open the pool/sandbox with "
                f"limits=Limits(network={limits.network!r})",
                backend=_NAME,
                sandbox_id=self.id,
            )
        wanted = (limits.memory_mb, limits.cpus, limits.pids)
        if wanted != self._applied:
            await self._sdk(_engine.update_limits, limits, _engine.runner_pids(self.runner == "static"))
            self._applied = wanted

    def _cwd(self, cwd: str | None) -> str:
        if cwd is None or cwd in ("", "."):
            return self._workdir
        if str(cwd).startswith("/"):  # a directory of the container's own filesystem
            return "/" if not str(cwd).strip("/") else check_sandbox_path_or_invalid(str(cwd), self.id)
        return posixpath.join(self._workdir, self._path(cwd))

    async def _check_directory(self, path: str, given: str) -> None:
        """An absolute ``cwd`` must be a directory: asked of the engine, so a typo is the caller's error.

        Raises:
            InvalidRequest: it does not exist or is not a directory (a link to one is fine).
        """
        found = await self._sdk(_abspath.stat_path, path)
        if found is not None and int(found.get("mode", 0)) & _abspath.GO_MODE_SYMLINK:
            return  # the runner's chdir follows it inside the container
        if found is None or not int(found.get("mode", 0)) & _abspath.GO_MODE_DIR:
            raise InvalidRequest(
                f"cwd {given!r} is not a directory in the container", backend=_NAME, sandbox_id=self.id
            )

    def _path(self, path: str) -> str:
        return check_path(path, self._workdir, self.id)

    def _any_path(self, path: str) -> str:
        """A checked path: relative to the workspace, or absolute outside it (see ``_abspath``)."""
        return check_path(path, self._workdir, self.id, absolute_ok=True)

    def _step_failed(self, results: Sequence[Mapping[str, Any]]) -> None:
        for result in results:
            if result.get("error"):
                self._break("the runner could not start a program")
                raise self._crashed(f"the runner could not start the program: {result['error']}")

    def _grace(self) -> float:
        return self._backend.grace_s

    # ----------------------------------------------------------------- the contract

    async def _run_to(self, request: RunRequest, sinks: Sinks) -> RunResult:
        """Write the source, compile if needed, run with stdin, fetch files (see :class:`Sandbox`).

        ``sinks`` get the program's output as the runner reads it (streaming).

        Raises:
            InvalidRequest: the request needs a network setting this container was not opened with,
                or holds what no program can receive (a lone surrogate, a NUL in env/argv, a name
                over 255 bytes, a limit Docker cannot apply).
            ToolchainMissing: the image lacks the language's compiler or interpreter.
            SandboxCrashed: the container or its runner died, or did not answer in time.
            Transient: the Docker engine could not be reached.
        """
        # The fast path needs the Python runner (the static one has none).
        planned = plan(request, warm_python=self.runner == "python" and self._backend.python_fast)
        lang = planned.language
        limits = request.limits
        source = utf8(planned.source, "the code", self.id)
        stdin = utf8(request.stdin or "", "stdin", self.id)
        check_env(request.env, request.argv, self.id)
        files = {self._path(path): data for path, data in request.files.items()}
        fetch = [self._path(path) for path in request.fetch_files]
        await self._ensure_limits(limits)
        if files:
            await self._sdk(_engine.put_files, self._workdir, files)
        src_name = planned.source_name
        env = base_env(self._workdir, lang, request.env)
        blobs = Blobs()
        blobs.add(source)
        steps = [
            make_step(
                step.argv,
                cwd=self._workdir,
                env=env,
                timeout_s=step.timeout_s,
                limits=limits,
                blobs=blobs,
                stdin=b"" if step.compiler else stdin,
                compile_step=step.compiler,
                python=None
                if step.python_script is None
                else {"script": step.python_script, "args": list(step.python_args)},
            )
            for step in planned.steps
        ]
        if sinks != (None, None):
            steps[-1]["live"] = True
        header = {"op": "run", "write": [[src_name, 0, len(source), 0o644]], "steps": steps}
        budget = sum(float(s["timeout"]) for s in steps) + self._grace()
        reply, blob = await self._call(header, blobs.parts, budget, sinks)
        results = reply["steps"]
        self._step_failed(results)
        self._raise_if_missing(results, lang, [str(step.argv[0]) for step in planned.steps])
        outputs = split_outputs(results, blob)
        compiled = classify(results[0], *outputs[0]) if planned.compile is not None else None
        common = {"language": lang.name, "backend": _NAME, "sandbox_id": self.id, "compile": compiled}
        if compiled is not None and (compiled.status is not Status.OK or len(results) < 2):
            return RunResult(status=Status.COMPILE_ERROR, duration_s=compiled.duration_s, **common)
        ran = classify(results[-1], *outputs[-1])
        fetched = await self._read_checked(fetch) if fetch else {}
        return RunResult(**ran.model_dump(), files=fetched, **common)

    def _raise_if_missing(self, results: Sequence[Mapping[str, Any]], lang: Language, argv0s: Sequence[str]) -> None:
        for result, missing in zip(results, argv0s, strict=False):
            if result.get("missing"):
                how = (
                    f"install {lang.install_hint} in the image" + (f" ({lang.unavailable})" if lang.unavailable else "")
                    if lang.unavailable or lang.install
                    else f"install the Debian package {lang.package!r} in the image (scripts/docker-setup.sh adds "
                    "the packages in SANDBOXKIT_DOCKER_EXTRA_PACKAGES; SANDBOXKIT_DOCKER_FULL=1 adds every "
                    "language's)"
                )
                raise ToolchainMissing(
                    f"the image {self._backend.image!r} has no {missing!r} (needed for {lang.name}); {how}, "
                    "or pick another image with image= / SANDBOXKIT_DOCKER_IMAGE",
                    backend=_NAME,
                    sandbox_id=self.id,
                )

    async def _exec_to(self, request: ExecRequest, sinks: Sinks) -> ExecResult:
        """Run ``bash -c command`` (``/bin/sh`` without bash) or an argv list in the workspace (see :meth:`Sandbox.exec`).

        ``sinks`` get the output as the runner reads it (streaming).

        ``cwd`` is relative to the workspace, or an absolute directory of the container (``/testbed``).

        Raises:
            InvalidRequest: ``cwd`` has a ``..`` component, or argv/env/stdin hold a lone surrogate or a NUL.
            SandboxCrashed: the container or its runner died, or did not answer in time.
        """
        argv, cwd, timeout = request.argv(self._shell), request.cwd, request.timeout_s
        extra_env = request.env
        check_env(extra_env, argv, self.id)
        data = utf8(request.stdin or "", "stdin", self.id)
        workdir = self._cwd(cwd)
        if workdir != self._workdir and str(cwd).startswith("/"):
            await self._check_directory(workdir, str(cwd))
        await self._ensure_limits(self._limits)
        blobs = Blobs()
        step = make_step(
            argv,
            cwd=workdir,
            env=base_env(self._workdir, None, extra_env),
            timeout_s=timeout or self._limits.timeout_s,
            limits=self._limits,
            blobs=blobs,
            stdin=data,
        )
        if sinks != (None, None):
            step["live"] = True
        header = {"op": "run", "steps": [step]}
        reply, blob = await self._call(header, blobs.parts, float(step["timeout"]) + self._grace(), sinks)
        self._step_failed(reply["steps"])
        result = reply["steps"][0]
        if result.get("missing"):  # like a shell: a failed command, not an infrastructure error
            missing = f"{argv[0]}: command not found\n"
            if sinks[1] is not None:
                sinks[1](missing.encode())
            return ExecResult(status=Status.FAILED, exit_code=127, stderr=missing)
        return classify(result, *split_outputs(reply["steps"], blob)[0])

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Write files with ``put_archive`` (parents created, owned by the program's user).

        A relative path is in the workspace; an absolute one anywhere in the container's own
        filesystem (outside the workspace it needs ``writable_root=True``; see ``_abspath``).

        Raises:
            InvalidRequest: a path contains ``..``, is on ``/tmp``, ``/dev``, ``/proc`` or ``/sys``, is
                outside the workspace on a read-only root, has a name over 255 bytes, or a path or text
                body is not valid Unicode.
            SandboxCrashed: the container is gone or the engine refused the archive.
        """
        checked: dict[str, bytes] = {}
        outside: dict[str, bytes] = {}
        for path, data in files.items():
            name = self._any_path(path)
            body = utf8(data, f"the text of file {path!r}", self.id) if isinstance(data, str) else bytes(data)
            if name.startswith("/"):
                _abspath.check_reachable(name, self.id)
                outside[name] = body
            else:
                checked[name] = body
        if checked:
            await self._sdk(_engine.put_files, self._workdir, checked)
        if outside:
            await self._sdk(_abspath.put_files, outside, self.id, self._backend.writable_root)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read regular workspace files; missing ones, and any the program could not read itself, are absent.

        The runner opens each path as the program's uid, one component at a time, never
        following a symlink (a program may plant ``etc -> /etc``), and sends small files back over
        the channel; larger ones it only checks, and the host copies them with ``get_archive``
        while it holds the sandbox (nothing runs in the container between the two). An absolute
        path outside the workspace is copied by the engine, which resolves it inside the container.

        Raises:
            InvalidRequest: a path contains ``..``, is on ``/tmp``, ``/dev``, ``/proc`` or ``/sys``, has a
                name over 255 bytes or is not valid Unicode.
            SandboxCrashed: the container is gone.
        """
        named = {check_sandbox_path_or_invalid(p, self.id): self._any_path(p) for p in paths}
        for name in named.values():
            if name.startswith("/"):
                _abspath.check_reachable(name, self.id)
        inside = [name for name in named.values() if not name.startswith("/")]
        found = await self._read_checked(inside) if inside else {}
        outside = [name for name in named.values() if name.startswith("/")]
        if outside:

            def copy(client: Any, container_id: str) -> dict[str, bytes]:
                copied = {}
                for path in outside:
                    data = _engine.get_file(client, container_id, "/", path)
                    if data is not None:
                        copied[path] = data
                return copied

            found.update(await self._sdk(copy))
        return {given: found[name] for given, name in named.items() if name in found}

    async def _read_checked(self, paths: list[str]) -> dict[str, bytes]:
        unique = list(dict.fromkeys(paths))
        async with self._lock:
            reply, blob = await self._call_locked({"op": "read", "paths": unique}, [], PING_TIMEOUT_S + self._grace())
            found: dict[str, bytes] = {}
            large: list[str] = []
            pos = 0
            for path, (state, size) in zip(unique, reply["files"], strict=True):
                if state == 1:
                    found[path] = blob[pos : pos + size]
                    pos += size
                elif state == 2:
                    large.append(path)

            def copy_large(client: Any, container_id: str) -> dict[str, bytes]:
                copied = {}
                for path in large:
                    data = _engine.get_file(client, container_id, self._workdir, path)
                    if data is not None:
                        copied[path] = data
                return copied

            if large:
                found.update(await self._sdk(copy_large))
        return found

    async def snapshot(self) -> Snapshot:
        """Archive the workspace into a checkpoint that new containers unpack (see ``_fork``).

        Raises:
            SandboxCrashed: the container is gone or closed, or the engine refused.
            Transient: talking to the engine failed.
        """
        return await take_snapshot(self, self._backend.checkpoints, self._backend.workdir_size_mb)

    async def alive(self) -> bool:
        """Ping the runner over the channel (no API call). Never raises."""
        if self._closed or self._broken is not None:
            return False
        try:
            await self._call({"op": "ping"}, [], PING_TIMEOUT_S)
            return True
        except SandboxError:
            return False

    async def open_kernel(self) -> Kernel:
        """This sandbox's Python kernel: ``docker exec`` of the kernel program as the program's user,
        inside the container's confinement (see ``_kernel``). Started on its first cell.

        Raises:
            ToolchainMissing: the image has no python3 that can run the kernel.
            SandboxCrashed: the sandbox is closed or unusable.
        """
        if self._closed or self._broken is not None:
            raise self._crashed(f"the sandbox is {'closed' if self._closed else 'unusable'}; open a new one")
        if self.runner == "static" and not await self._has_kernel_python():
            raise ToolchainMissing(
                f"Python kernels need python3 with its standard library in the image {self._backend.image!r}, "
                "which has none (it runs on the static runner); use an image with python3",
                backend=_NAME,
                sandbox_id=self.id,
            )
        if self._kernel is None or self._kernel.closed:

            async def start() -> KernelLink:
                return await self._sdk(start_kernel, self._limits, self._workdir, self.id)

            self._kernel = Kernel(start, self._limits, backend=_NAME, sandbox_id=self.id)
        return self._kernel

    async def _has_kernel_python(self) -> bool:
        """Whether the image's python3 can run the kernel program (probed once per sandbox).

        Only asked on the static runner: the Python runner proves python3 works by running.
        """
        if self._kernel_python is None:
            probe = await self.exec(["python3", "-c", "import json, marshal, select"], timeout=30)
            self._kernel_python = probe.exit_code == 0
        return self._kernel_python

    def _stop_kernel(self) -> None:
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            kernel.discard()

    async def reset(self) -> bool:
        """Give the next run what a fresh container gives, or say False (the pool then discards it).

        The runner kills every process, wipes the workspace, ``/tmp``, ``/dev/shm`` and
        ``/dev/mqueue`` and removes every SysV IPC object (shared memory would otherwise stay
        charged to the container's memory, and carry data to the next tenant); anything left
        makes the reply an error.
        """
        if self._closed or self._broken is not None or self._backend.writable_root:
            return False  # a writable root keeps what a program wrote outside the workspace: never reuse it
        self._stop_kernel()  # its variables belong to the last tenant (the runner kills what is left)
        try:
            await self._call({"op": "reset"}, [], RESET_TIMEOUT_S)
            return True
        except SandboxError as exc:
            log.info("reset of docker sandbox %s failed: %s", self.id, exc)
            return False

    async def restore(self, snapshot: Snapshot) -> bool:
        """Unpack a checkpoint of this backend into this (new or reset) sandbox: a warm fork (see ``_fork``)."""
        return await restore_into(self, self._backend.checkpoints, snapshot)

    async def suspend(self) -> bool:
        """``docker pause``: every process of the container frozen (no CPU); memory stays resident.

        Under load the runtime can fail to freeze a busy container ("unable to freeze"), possibly half way.
        That is the engine's trouble, not the program's, so it is not a crashed sandbox: the container is
        thawed and False says nothing is suspended, as on a backend that cannot suspend.

        Raises:
            SandboxCrashed: the container is gone.
        """
        import docker.errors

        def pause(client: Any, cid: str) -> bool:
            try:
                client.api.pause(cid)
            except docker.errors.NotFound:
                raise
            except docker.errors.APIError:
                with contextlib.suppress(docker.errors.APIError):  # "not paused": it never froze
                    client.api.unpause(cid)
                return False
            return True

        return await self._sdk(pause)

    async def resume(self) -> None:
        """``docker unpause``."""
        await self._sdk(lambda client, cid: client.api.unpause(cid))

    async def close(self) -> None:
        """Remove the container (and its workspace volume). Idempotent; finishes even when cancelled."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            self._stop_kernel()
            self._channel.close()
            await self._backend.remove(self.container_id)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[HeldSandbox]:
        """This sandbox with its lock taken, as the narrow surface a checkpoint's transfer uses (``_fork``)."""
        async with self._lock:
            yield _Held(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("broken" if self._broken else "open")
        return f"<DockerSandbox {self.id} {state}>"


class _Held:
    """A :class:`DockerSandbox` whose lock its holder has: the engine and runner calls, and no other state."""

    def __init__(self, sandbox: DockerSandbox) -> None:
        self._sandbox = sandbox
        self.id = sandbox.id
        self.workdir = sandbox._workdir

    @property
    def usable(self) -> bool:
        return not self._sandbox._closed and self._sandbox._broken is None

    async def sdk(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._sandbox._sdk(fn, *args)

    async def call(
        self, header: dict[str, Any], blobs: Sequence[bytes], timeout_s: float
    ) -> tuple[dict[str, Any], bytes]:
        return await self._sandbox._call_locked(header, blobs, timeout_s)

    def crashed(self, message: str) -> SandboxCrashed:
        return self._sandbox._crashed(message)

    def mark_broken(self, why: str) -> None:
        self._sandbox._break(why)


def check_sandbox_path_or_invalid(path: str, sandbox_id: str) -> str:
    """The caller's path, normalised (the key it gets its file back under)."""
    try:
        return check_sandbox_path(path, absolute_ok=True)
    except ValueError as exc:
        raise InvalidRequest(str(exc), backend=_NAME, sandbox_id=sandbox_id) from exc
