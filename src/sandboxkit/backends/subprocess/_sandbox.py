"""``SubprocessSandbox``: one sandbox of the subprocess backend (its workspace, fork server and limits).

Split from ``_backend`` (which keeps the backend: discovery, capabilities, options, cleanup)
because the sandbox alone is one idea of a few hundred lines: run/exec through the fork server,
the per-run limits, reset and teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.to_thread

from sandboxkit._plan import plan
from sandboxkit.backends.subprocess import _isolation as isolation
from sandboxkit.backends.subprocess import _rootfs as rootfs
from sandboxkit.backends.subprocess import _seccomp as seccomp
from sandboxkit.backends.subprocess._cgroup import SandboxCgroup
from sandboxkit.backends.subprocess._fork import DirectorySnapshot, fork_into, take_snapshot
from sandboxkit.backends.subprocess._forkserver import (
    ForkServer,
    ServerLost,
    ServerStale,
    ServerStartError,
    ServerUnwiped,
)
from sandboxkit.backends.subprocess._freeze import Freezer, frozen, suspend_freezer
from sandboxkit.backends.subprocess._host_spawn import Command, run_from_host
from sandboxkit.backends.subprocess._kernel import KernelLaunch, start_kernel
from sandboxkit.backends.subprocess._output import OutputLimits
from sandboxkit.backends.subprocess._status import Outcome, classify, rlimits_for
from sandboxkit.backends.subprocess._workspace import Workspace, program_env
from sandboxkit.base import Snapshot
from sandboxkit.errors import BackendUnavailable, InvalidRequest, SandboxCrashed, SandboxLost, ToolchainMissing
from sandboxkit.kernel import Kernel, KernelLink
from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult, Status
from sandboxkit.streaming import CallbackSandbox, Sinks

__all__ = ["SandboxHost", "SubprocessSandbox"]


log = logging.getLogger(__name__)
NAME = "subprocess"
#: Memory the fork server and bwrap hold inside the sandbox's memory cgroup, on top of the program's.
SERVER_MEMORY = 32 << 20
#: Processes of the sandbox that are not the program's: bwrap (2), the server, and slack.
SERVER_PIDS = 4
#: Tries to start a sandbox's fork server before giving up.
START_ATTEMPTS = 3
#: Largest value an rlimit or a cgroup byte count can hold (a signed 64-bit integer).
_MAX_BYTES = (1 << 63) - 1
#: The kernel's PID_MAX_LIMIT: no sandbox can have more processes than this.
_MAX_PIDS = 1 << 22
#: The largest program file the forked child writes itself (``_spawn``): with the request ahead
#: of stdin it still fits the pipe in one write. A larger one is written by the host.
INLINE_SOURCE_MAX = 32 << 10


class SandboxHost(Protocol):
    """What a sandbox reads of its :class:`~._backend.SubprocessBackend`: the options, and three services.

    Named here rather than imported: the backend makes sandboxes, so importing it back would make
    the two files a circle (and let a sandbox reach the backend's private state). The attributes
    are the backend's options of the same names (see its docstring).
    """

    isolation: isolation.Isolation
    rootfs: rootfs.RootImage | None
    root: str
    path: str
    workdir: str
    disk_mb: int
    tmp_mb: int
    seccomp: bool
    warm_python: bool
    #: The ``python3`` that runs the fork server and kernels, or None (commands start from the host).
    server_python: str | None
    preload_modules: tuple[str, ...]
    #: sandboxkit's own modules every fork server runs at start: name -> (source, bytecode).
    python_modules: dict[str, tuple[str, bytes]]
    #: The backend's checkpoints not yet released (a new one joins).
    checkpoints: set[DirectorySnapshot]

    def has_toolchain(self, lang: Language) -> bool:
        """Whether ``lang``'s binaries are on the sandbox PATH."""
        ...

    def forget(self, sandbox: SubprocessSandbox) -> None:
        """``sandbox`` closed: the backend no longer tears it down."""
        ...


class SubprocessSandbox(CallbackSandbox):
    """One workspace on this machine and the fork server that runs its commands in isolation."""

    backend_name = NAME
    #: ``reset`` holds no anyio cancel scope across a wait (it takes an ``asyncio.Lock`` and, with a
    #: rootfs view, reads a report): the pool steps it before setting up its timeout (``sandboxkit._started``).
    reset_steps_inline = True

    def __init__(self, backend: SandboxHost, limits: Limits) -> None:
        self.id = f"sbx-{secrets.token_hex(6)}"
        self.limits = limits
        self._backend = backend
        self._iso = backend.isolation
        self._closed = False
        self._lock = asyncio.Lock()
        self._server: ForkServer | None = None
        #: A reset did not wait for the server's state report: the next command is ``fresh``.
        self._handover = False
        #: A reset left the last tenant's files for the fork server to remove (``_server_main._wipe``):
        #: the next command tells it to, before its child exists; anything else first wipes on the host.
        self._wipe_pending = False
        #: The last step's limits worked out (a pool's runs repeat them; see ``_Step``).
        self._step: _Step | None = None
        self._server_network: bool | None = None
        image = backend.rootfs
        #: Whether ``uid`` is this sandbox's alone (rootfs sandboxes share the image owner's only where the
        #: image cannot be idmapped; see ``_rootfs``).
        self._own_uid = image is None or (self._iso.is_root and rootfs.gives_own_uids(image))
        self.uid = (isolation.allocate_uid() if self._own_uid else rootfs.ROOTFS_UID) if self._iso.is_root else None
        owner = (self.uid, self.uid) if self.uid is not None else None
        # The owner's pid in the names lets ``cleanup`` tell a crashed process's leftovers from live ones.
        tag = f"{self.id}-p{os.getpid()}"
        path = os.path.realpath(tempfile.mkdtemp(prefix=f"{tag}-", dir=backend.root))
        self.workspace = Workspace(path, owner, self.id, mode=_mode_of(path))
        #: The sandbox's own directory on the host (its tmpfs): the workspace, or what holds its root
        #: view or (forked) its workspace overlay.
        self._base = path
        #: The copy-on-write view of the backend's root filesystem, or None (the host's, read-only).
        self.view: rootfs.RootView | None = None
        #: Why the sandbox can no longer be used (its fork server died on its own), or None.
        self._broken: str | None = None
        self._mounted = False
        self.cgroup: SandboxCgroup | None = None
        self._kernel: Kernel | None = None
        #: The running kernel's freezer (set by ``start_kernel``): host file access holds it still.
        self._freezer: Freezer | None = None
        try:
            if owner is not None:
                os.chown(path, *owner)
            if self._iso.tmpfs and owner is not None:
                isolation.mount_tmpfs(path, size_mb=backend.disk_mb, uid=owner[0], gid=owner[1])
                self._mounted = True
            if image is not None and owner is not None:
                self.view = rootfs.RootView(image, path, owner, backend.workdir)
                self.view.mount()
                self.workspace = Workspace(self.view.workdir_host, owner, self.id, anchor=self.view.root)
            if self._iso.cgroup.parents():
                self.cgroup = SandboxCgroup(self._iso.cgroup, tag)
        except BaseException:
            self.release_sync()
            raise

    # ------------------------------------------------------------------ helpers

    def _check_open(self, *, wipe: bool = True) -> None:
        """Refuse a closed or broken sandbox; ``wipe``: finish a reset's wipe now (see ``_wipe_now``).

        Every operation starts here, so none sees the last tenant's files: only a warm Python run,
        whose command empties the workspace in the server first, passes ``wipe=False``.
        """
        if self._closed:
            raise SandboxCrashed("the sandbox is closed; open a new one", backend=NAME, sandbox_id=self.id)
        if self._broken is not None:
            raise SandboxCrashed(self._broken, backend=NAME, sandbox_id=self.id)
        if self.view is not None:
            self.view.repair_workdir()  # no program runs now; the last one may have replaced /testbed
        if wipe and self._wipe_pending:
            self._wipe_now()

    def _wipe_now(self) -> None:
        """Remove the last tenant's files on the host, as root (what the reset left to the server).

        Raises:
            SandboxLost: the workspace could not be wiped; nothing of this call ran.
        """
        self._wipe_pending = False
        try:
            self.workspace.wipe()
        except OSError as exc:
            log.warning("could not wipe workspace of %s", self.id, exc_info=True)
            self._broken = f"the workspace could not be wiped between two tenants ({exc.strerror})"
            if self._server is not None:
                self._server.kill()
            raise SandboxLost(
                f"{self._broken}; nothing of this call ran: open a new sandbox (a pool does so by itself)",
                backend=NAME,
                sandbox_id=self.id,
            ) from exc

    def _write(self, files: Mapping[str, bytes | str]) -> None:
        """Write a run's files from the host: the last tenant's go first (a reset may have left them to the server)."""
        if self._wipe_pending:
            self._wipe_now()
        with self._frozen_for(files):
            self.workspace.write(files)

    def _discard(self) -> None:
        """The server died on its own: never start another in a workspace the program controlled."""
        self._broken = (
            "the sandbox's fork server died during an earlier command (a program can kill its parent); "
            "the sandbox is discarded rather than restarted in a workspace the program controlled: "
            "open a new one (a pool does so by itself)"
        )
        if self._server is not None:
            self._server.kill()

    def _lost(self) -> SandboxLost:
        """The server died between two tenants: discard the sandbox; the caller's call never ran."""
        self._handover = False
        self._discard()
        return SandboxLost(
            "the sandbox's fork server died between two tenants; nothing of this call ran: "
            "open a new sandbox (a pool does so by itself)",
            backend=NAME,
            sandbox_id=self.id,
        )

    def _cwd(self, cwd: str | None) -> str:
        """Host path of ``exec``'s working directory: the workspace, a directory in it, or (rootfs) any absolute one."""
        if cwd in (None, "", "."):
            return self.workspace.path
        if self.view is not None:
            if not str(cwd).strip("/"):
                return self.view.root
            checked = self.view.absolute(rootfs.split_paths([str(cwd)], self.id)[0][1])
            try:
                return rootfs.resolve_in_root(self.view.root, checked, follow_last=True)
            except OSError as exc:  # a link cycle
                raise InvalidRequest(str(exc), backend=NAME, sandbox_id=self.id) from None
        return self.workspace.resolve(str(cwd), strict=True)

    def _is_dir(self, host: str) -> bool:
        """Whether ``exec``'s working directory (a host path from :meth:`_cwd`) is a directory, by fd.

        ``_cwd`` resolved the sandbox's links by name; the check walks the answer below the
        workspace (or the view's root) with no link followed, so a directory swapped for a
        link meanwhile is refused rather than stat'ed on the host.
        """
        if self.view is not None:
            return Workspace(self.view.root, self.view.owner, self.id).is_dir(host)
        try:
            real = os.path.realpath(host)  # in-workspace links are the program's (``_cwd`` checked they stay inside)
        except OSError:  # changed while it was read
            return False
        return self.workspace.is_dir(real)

    def _text(self, value: str, what: str) -> bytes:
        """``value`` as UTF-8, or InvalidRequest for text that cannot be (lone surrogates)."""
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequest(
                f"{what} {value[:60]!r} is not valid Unicode ({exc.reason} at position {exc.start}); "
                "remove lone surrogates",
                backend=NAME,
                sandbox_id=self.id,
            ) from None

    def _check_texts(self, env: Mapping[str, str], argv: Sequence[str]) -> None:
        for key, value in env.items():
            self._text(key, "environment variable name")
            self._text(value, f"environment variable {key!r}")
        for arg in argv:
            self._text(arg, "argument")

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return program_env(self.inner_path, self._backend.path, extra)

    @property
    def _server_wipes(self) -> bool:
        """Whether a reset leaves the wipe to the fork server: it lives in a mount namespace of its own,
        where the workspace is all it can reach (without bwrap it would walk the host's tree as the
        sandbox's user; a root view's upper layer is discarded whole instead)."""
        return self.view is None and self._iso.bwrap is not None

    @property
    def inner_path(self) -> str:
        """Where the program sees its workspace: the backend's ``workdir`` under bubblewrap, else the host path.

        ``workdir`` defaults to :data:`INNER_WORKDIR`; an agent environment asks for ``/testbed`` so a
        program file naming ``/testbed/...`` literally finds its files. A fixed path hides the host's layout from the program and keeps tracebacks free of
        sandboxkit's directory names (``File "/work/main.py"``, as on the Docker backend).
        """
        if self.view is not None:
            return self.view.workdir
        return self._backend.workdir if self._iso.bwrap is not None else self.workspace.path

    def _frozen_for(self, paths: Mapping[str, object]) -> contextlib.AbstractContextManager[None]:
        """Freeze the kept processes while a run writes or fetches ``paths``, unless each is a top-level name.

        A top-level name is opened from the workspace's own descriptor with ``O_NOFOLLOW`` in one step, which
        no rename can race: the descriptor is reached without following any link (a bind mount, or in a root
        filesystem a walk from the view's root), so at worst the write lands in the sandbox's own directory
        that replaced it, or fails as raced. Only a path with
        directories on its way needs the freeze on top of the fd walk; skipping it for the usual
        ``session.run(code)`` keeps a run next to a live kernel as cheap as before (1.46 -> 2.17 ms with it).
        """
        if any("/" in str(path).strip("/") for path in paths):
            return frozen(self._freezer)
        return contextlib.nullcontext()

    def _inner(self, host_path: str) -> str:
        """``host_path`` (the workspace or a path inside it) as the program sees it."""
        if self.view is not None:
            return self.view.inner(host_path)
        ws = self.workspace.path
        if self._iso.bwrap is None or host_path == ws:
            return self.inner_path if host_path == ws else host_path
        return self.inner_path + host_path[len(ws) :] if host_path.startswith(ws + "/") else host_path

    def _prefix(self, network: bool, cwd: str | None = None) -> tuple[list[str], list[int]]:
        """The namespace wrapper of this sandbox's processes (empty without bubblewrap).

        Returns:
            The argv prefix and the descriptors it names (the seccomp program), which the
            process starting it must pass on and then close.
        """
        iso = self._iso
        if iso.bwrap is None:
            return [], []
        fds = []
        if self._backend.seccomp:
            fds.append(seccomp.seccomp_fd(seccomp.filter_program(deny_unix_sockets=not network)))
        cg = self.cgroup
        own = []
        if cg is not None:
            if cg.support.version == 2 and cg.memory_dir is not None:
                own.append((cg.memory_dir, isolation.CGROUP_ROOT))
            else:
                own += [
                    (d, f"{isolation.CGROUP_ROOT}/{c}")
                    for d, c in ((cg.memory_dir, "memory"), (cg.pids_dir, "pids"))
                    if d
                ]
        argv = isolation.bwrap_argv(
            iso,
            bwrap=iso.bwrap,
            workspace=self.workspace.path,
            inner=self.inner_path,
            root=self._backend.root,
            network=network,
            tmp_mb=self._backend.tmp_mb,
            cwd=self._inner(cwd) if cwd is not None else None,
            seccomp_fd=fds[0] if fds else None,
            cgroup_dirs=own,
            rootfs=self.view.root if self.view is not None else None,
        )
        return argv, fds

    async def _server_for(self, network: bool) -> ForkServer | None:
        """The running fork server, (re)started when missing, dead or on the wrong network."""
        python = self._backend.server_python if self.view is None else await self._image_python()
        if python is None:
            return None
        # Asked once (a ``waitpid``): a dead server stays dead, and one that dies after this is
        # seen by the command itself, when its socket closes.
        alive = self._server is not None and self._server.alive
        if self._server is not None and self._handover and not alive:
            raise self._lost()  # died between two tenants (see ``reset``)
        if self._server is not None:
            # A live server's report on the last command is read by the next command itself
            # (``ForkServer.run``): waiting for it here would put the server's state check on
            # this command's path. One that is gone is settled now: did it die on its own?
            if not alive:
                await self._server.settle()
            if self._server.died:
                self._discard()
                self._check_open()
            # sandboxkit modules registered since it started (the judge's harness) are loaded by a
            # new server, between two tenants only: a tenant's /tmp lives as long as its server.
            stale = self._handover and self._server.modules != self._backend.python_modules
            if alive and self._server_network == network and not stale:
                return self._server
            # Killed by the host (a late reply, a cancelled call, state left for reset), on the
            # other network, or without the backend's modules: a new server is safe, it imports
            # nothing the program could have planted.
            self._server.kill()
        iso = self._iso
        for attempt in range(START_ATTEMPTS):
            prefix, fds = self._prefix(network)
            server = ForkServer(
                python=python,
                prefix=prefix,
                user=(self.uid, self.uid) if self.uid is not None else None,
                env=self._env(None),
                cwd=self.workspace.path,
                cgroup=self.cgroup,
                sweep_all=iso.bwrap is not None or self.uid is not None,
                preload=self._backend.preload_modules,
                modules=self._backend.python_modules,
                private_state=iso.bwrap is not None,
                pass_fds=fds,
                hold_pipes=iso.bwrap is not None and not network,
                workspace=self._inner(self.workspace.path) if self._server_wipes else None,
            )
            try:
                await server.start()
                break
            except ServerStartError as exc:
                # bwrap can lose a race with a host mount that disappears while it copies the
                # mount table; that passes. A real misconfiguration fails every attempt.
                if attempt < START_ATTEMPTS - 1:
                    log.debug("fork server of %s failed to start, retrying: %s", self.id, exc)
                    await asyncio.sleep(0.01 * (attempt + 1))
                    continue
                raise BackendUnavailable(
                    f"cannot start the sandbox: {exc}; run `sandboxkit doctor` to see what this machine allows",
                    backend=NAME,
                    sandbox_id=self.id,
                ) from exc
        self._server, self._server_network, self._handover = server, network, False
        return server

    async def _image_python(self) -> str | None:
        """``python3`` if the image's interpreter can run the fork server (probed once per image), else None."""
        assert self.view is not None
        image = self.view.image
        if image.python_ok is None:
            if not image.has_binary("python3", self._backend.path):
                image.python_ok = False
            else:
                prefix, fds = self._prefix(False)
                probe = Command(
                    ["python3", "-I", "-c", rootfs.PYTHON_PROBE],
                    self.workspace.path,
                    self._env(None),
                    b"",
                    30.0,
                    OutputLimits.of(Limits(output_bytes=4096), (None, None)),
                    [],
                    prefix=prefix,
                    user=(self.uid, self.uid) if self.uid is not None else None,
                    pass_fds=fds,
                )
                image.python_ok = (await run_from_host(probe)).returncode == 0
            if not image.python_ok:
                log.info("image %s has no python3 that runs the fork server; commands start cold", image.source)
        return "python3" if image.python_ok else None

    def _rlimits(
        self, limits: Limits, timeout_s: float, lang: Language | None, *, compiler: bool = False
    ) -> list[tuple[int, int]]:
        import resource

        self._check_limits(limits)
        # Compilers (rustc/LLVM, javac, go) reserve far more address space than they touch: an
        # RLIMIT_AS at memory_mb makes a correct program a compile_error, a wrong reward caused by
        # the sandbox. Their memory is held by the cgroup (RSS) instead, like the hungry runtimes'.
        hungry = compiler or (lang is not None and lang.virtual_memory_hungry)
        out = rlimits_for(limits, timeout_s, address_space=not hungry)
        if limits.pids is not None and self.uid is not None and self._own_uid:
            # Counted per host uid, and this uid is the sandbox's alone: a per-sandbox cap.
            out.append((resource.RLIMIT_NPROC, limits.pids + SERVER_PIDS))
        if hungry and limits.memory_mb is not None and (self.cgroup is None or self.cgroup.memory_dir is None):
            out.append((resource.RLIMIT_DATA, limits.memory_mb << 20))  # no cgroup: cap the heap instead
        return out

    def _check_limits(self, limits: Limits) -> None:
        """Reject limits no kernel interface can hold (they would fail deep inside as OverflowError)."""
        for field, value, unit in (
            ("memory_mb", limits.memory_mb, 1 << 20),
            ("file_size_mb", limits.file_size_mb, 1 << 20),
        ):
            if value is not None and value * unit + SERVER_MEMORY > _MAX_BYTES:
                raise InvalidRequest(
                    f"limits.{field}={value!r} is more than the kernel can represent (at most "
                    f"{(_MAX_BYTES - SERVER_MEMORY) // unit}); use a smaller value, or None for the default",
                    backend=NAME,
                    sandbox_id=self.id,
                )
        if limits.pids is not None and limits.pids + SERVER_PIDS > _MAX_PIDS:
            raise InvalidRequest(
                f"limits.pids={limits.pids!r} is more than the kernel allows (at most {_MAX_PIDS - SERVER_PIDS}); "
                "use a smaller value, or None for the default",
                backend=NAME,
                sandbox_id=self.id,
            )

    def _apply_cgroup(self, limits: Limits) -> None:
        if self.cgroup is None:
            return
        try:
            if limits.memory_mb is not None:
                self.cgroup.set_memory((limits.memory_mb << 20) + SERVER_MEMORY)
            if limits.pids is not None:
                self.cgroup.set_pids(limits.pids + SERVER_PIDS)
            self.cgroup.set_cpus(limits.cpus)
        except OSError as exc:
            if exc.errno == errno.EBUSY:  # cgroup v1 refuses a limit below what is charged already
                held = self.cgroup.memory_usage()
                raise InvalidRequest(
                    f"limits.memory_mb={limits.memory_mb!r} is less than this sandbox already holds "
                    f"({held >> 20} MB: files in /tmp, /dev/shm and the workspace count against its memory); "
                    "remove those files first, or ask for more memory",
                    backend=NAME,
                    sandbox_id=self.id,
                ) from exc
            raise InvalidRequest(
                f"the kernel refused limits memory_mb={limits.memory_mb!r}, pids={limits.pids!r} for this "
                f"sandbox's cgroup ({exc.strerror}); use smaller values",
                backend=NAME,
                sandbox_id=self.id,
            ) from exc

    async def _spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stdin: bytes,
        timeout_s: float,
        limits: Limits,
        lang: Language | None,
        python_file: str | None = None,
        source: tuple[str, bytes] | None = None,
        compiler: bool = False,
        sinks: Sinks = (None, None),
    ) -> Outcome:
        """Run one command through the fork server (or the cold path when there is none).

        ``source``: the workspace name and bytes of ``python_file``, not written yet. The forked
        child writes it from the request (the host's write cost a sixth of its CPU per pooled run);
        the host writes it itself for the cold path, and for a file too large to ride in the request
        comfortably (``INLINE_SOURCE_MAX``).

        Raises:
            InvalidRequest: the command and its environment are too large to send.
        """
        plain = sinks == _NO_SINKS
        step = self._step
        if plain and step is not None and step.fits(limits, timeout_s, lang, compiler):
            rlimits, output = step.rlimits, step.output
        else:
            rlimits = self._rlimits(limits, timeout_s, lang, compiler=compiler)
            output = OutputLimits.of(limits, sinks)
            if plain:
                self._step = _Step(limits, timeout_s, lang, compiler, rlimits, output)
        server = await self._server_for(limits.network)
        if source is not None and (server is None or len(source[1]) > INLINE_SOURCE_MAX):
            self._write({source[0]: source[1]})
            source = None
        if server is None:
            if self._wipe_pending:  # a command the host runs itself
                self._wipe_now()
            prefix, fds = self._prefix(limits.network, cwd)
            cmd = Command(
                argv,
                cwd,
                env,
                stdin,
                timeout_s,
                output,
                rlimits,
                prefix=prefix,
                user=(self.uid, self.uid) if self.uid is not None else None,
                pass_fds=fds,
            )
            try:
                return await run_from_host(cmd)
            except FileNotFoundError:
                missing = f"{argv[0]}: command not found\n".encode()
                if sinks[1] is not None:
                    sinks[1](missing)
                return Outcome(127, None, b"", missing, False, False, 0.0)
        self._apply_cgroup(limits)
        request: dict[str, object] = {"cwd": self._inner(cwd), "env": dict(env), "rlimits": rlimits}
        if python_file is not None:
            request.update(python=self._inner(python_file), args=list(argv))
            if source is not None:
                request["source"] = source[1]
        else:
            request["argv"] = list(argv)
        fresh, self._handover = self._handover, False
        if self._kernel is not None:  # it lives in the cgroup beside the commands: its OOM kills are not theirs
            server.oom_unknown()
        while True:
            wipe = self.workspace.mode if self._wipe_pending else None
            try:
                outcome = await server.run(
                    request,
                    stdin=stdin,
                    timeout_s=timeout_s,
                    output=output,
                    fresh=fresh,
                    alive_known=True,
                    wipe=wipe,
                )
                break
            except (ServerStale, ServerUnwiped) as exc:
                # The last tenant left state (a server in fresh namespaces runs this), or files its
                # server could not remove (the host removes them first).
                if isinstance(exc, ServerUnwiped):
                    self._wipe_now()
                fresh = False
                restarted = await self._server_for(limits.network)
                assert restarted is not None
                server = restarted
            except ServerLost as exc:  # died between two tenants: nothing of this call ran
                raise self._lost() from exc
            except ConnectionError as exc:  # died between commands: its killer controlled this workspace
                self._discard()
                raise SandboxCrashed(self._broken or str(exc), backend=NAME, sandbox_id=self.id) from exc
            except ValueError as exc:
                raise InvalidRequest(str(exc), backend=NAME, sandbox_id=self.id) from exc
        if server.died:  # this command's program killed the server: its result stands, the sandbox goes
            self._discard()
        elif wipe is not None:
            # Emptied before the command ran, if the server took it: it reported the command's exit
            # and lives. Killed without a report, it may not have: the sandbox goes (the result stands).
            self._wipe_pending = False
            if server.sock is None:
                self._discard()
        return outcome

    # ------------------------------------------------------------------ contract

    async def _run_to(self, request: RunRequest, sinks: Sinks) -> RunResult:
        """Write the code and files, compile if needed, run with stdin, fetch files.

        ``sinks`` get the program's output chunks as the pipes are read.

        Raises:
            ToolchainMissing: the language's compiler or interpreter is not installed here.
            BackendUnavailable: the sandbox's isolation could not be started.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open(wipe=False)
        planned = plan(request, warm_python=self._backend.warm_python)
        lang = planned.language
        if not self._backend.has_toolchain(lang):
            raise ToolchainMissing(
                f"{lang.name} needs {', '.join((*lang.binaries, *lang.files))}, not found on the sandbox PATH "
                f"{self._backend.path!r}; {lang.install_hint}"
                + (f" (not installed by sandboxkit's bootstrap: {lang.unavailable})" if lang.unavailable else ""),
                backend=NAME,
                sandbox_id=self.id,
            )
        limits = request.limits
        stdin = self._text(request.stdin or "", "stdin")
        self._check_texts(request.env, request.argv)
        async with self._lock:
            self._check_open(wipe=False)
            src = planned.source_name
            run = planned.run
            warm = run.python_script is not None
            source = _inline_source(src, planned.source) if warm and not request.files else None
            if source is None or self.view is not None:  # else the child writes it (see _spawn)
                source = None
                self._write({**request.files, src: planned.source})
            env = self._env({**lang.env, **request.env})
            compile_result: ExecResult | None = None
            if planned.compile is not None:
                compiled = await self._spawn(
                    planned.compile.argv,
                    cwd=self.workspace.path,
                    env=env,
                    stdin=b"",
                    timeout_s=planned.compile.timeout_s,
                    limits=limits.merged(
                        output_bytes=max(limits.output_bytes, 1 << 20), pids=max(limits.pids or 0, 64)
                    ),
                    lang=lang,
                    compiler=True,
                )
                compile_result = classify(compiled)
                if compile_result.status is not Status.OK:
                    return RunResult(
                        status=Status.COMPILE_ERROR,
                        compile=compile_result,
                        language=lang.name,
                        backend=NAME,
                        sandbox_id=self.id,
                        duration_s=compile_result.duration_s,
                    )
            outcome = await self._spawn(
                run.python_args if warm else run.argv,
                cwd=self.workspace.path,
                env=env,
                stdin=stdin,
                timeout_s=run.timeout_s,
                limits=limits,
                lang=lang,
                python_file=os.path.join(self.workspace.path, src) if warm else None,
                source=source,
                sinks=sinks,
            )
            fetched: dict[str, bytes] = {}
            if request.fetch_files:
                with self._frozen_for(dict.fromkeys(request.fetch_files)):
                    fetched = self.workspace.read(request.fetch_files)
        return classify(
            outcome,
            RunResult,
            compile=compile_result,
            files=fetched,
            language=lang.name,
            backend=NAME,
            sandbox_id=self.id,
        )

    async def _exec_to(self, request: ExecRequest, sinks: Sinks) -> ExecResult:
        """Run a shell command (``bash -c``) or an argv list in the workspace (see :meth:`Sandbox.exec`).

        ``sinks`` get the output chunks as the pipes are read.

        Raises:
            InvalidRequest: ``cwd`` escapes the workspace (with a root filesystem: is not a directory
                of the view).
            BackendUnavailable: the sandbox's isolation could not be started.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        cwd = request.cwd
        workdir = self._cwd(cwd)
        argv = request.argv(self.view.image.shell if self.view is not None else "bash")
        stdin_data = self._text(request.stdin or "", "stdin")
        self._check_texts(request.env, argv)
        timeout_s = request.timeout_s or self.limits.timeout_s
        async with self._lock:
            self._check_open()
            if not self._is_dir(workdir):
                raise InvalidRequest(f"cwd {cwd!r} is not a directory in the sandbox", backend=NAME, sandbox_id=self.id)
            outcome = await self._spawn(
                argv,
                cwd=workdir,
                env=self._env(request.env),
                stdin=stdin_data,
                timeout_s=timeout_s,
                limits=self.limits,
                lang=None,
                sinks=sinks,
            )
        return classify(outcome)

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Write files into the workspace (with a root filesystem: anywhere in the sandbox's view).

        Raises:
            InvalidRequest: a path contains ``..``, is absolute without a root filesystem, or is on
                the sandbox's private ``/tmp``, ``/dev``, ``/proc`` or ``/sys``.
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        with frozen(self._freezer):
            if self.view is not None:
                rootfs.write_files(self.view, self.workspace, files, self.id)
            else:
                self.workspace.write(files)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files from the workspace (with a root filesystem: its view); missing ones are absent.

        It raises what :meth:`write_files` documents, for the same paths.
        """
        self._check_open()
        with frozen(self._freezer):
            if self.view is not None:
                return rootfs.read_files(self.view, self.workspace, paths, self.id)
            return self.workspace.read(paths)

    async def open_kernel(self) -> Kernel:
        """This sandbox's Python kernel: its own bubblewrap instance with the sandbox's workspace,
        uid, cgroup, seccomp filter and limits (see ``_kernel``). Started on its first cell.

        Raises:
            SandboxCrashed: the sandbox is closed.
        """
        self._check_open()
        if self._kernel is None or self._kernel.closed:

            async def start() -> KernelLink:
                self._check_open()
                link, self._freezer = start_kernel(self._kernel_launch())
                return link

            self._kernel = Kernel(start, self.limits, backend=NAME, sandbox_id=self.id)
        return self._kernel

    def _kernel_launch(self) -> KernelLaunch:
        """How this sandbox's kernel starts: its limits applied to the cgroup, a command's rlimits
        (minus CPU time), the sandbox's wrapper, uid and environment (see ``_kernel``).

        Raises:
            ToolchainMissing: the sandbox has no ``python3``.
            InvalidRequest: the sandbox's limits cannot be applied.
        """
        import resource

        python = self._backend.server_python
        if python is None:
            raise ToolchainMissing(
                f"a Python kernel needs python3 on the sandbox PATH {self._backend.path!r}; install python3",
                backend=NAME,
                sandbox_id=self.id,
            )
        limits = self.limits
        self._apply_cgroup(limits)
        rlimits = [
            r
            for r in self._rlimits(limits, limits.timeout_s, resolve_language("python"))
            if r[0] != resource.RLIMIT_CPU
        ]
        prefix, fds = self._prefix(limits.network)
        return KernelLaunch(
            python=python,
            limits=limits,
            rlimits=rlimits,
            prefix=prefix,
            pass_fds=fds,
            cwd=self.workspace.path,
            env=self._env(None),
            cgroup=self.cgroup,
            uid=self.uid,
            sandbox_id=self.id,
            forget_freezer=self._forget_freezer,
        )

    def _forget_freezer(self, freezer: Freezer) -> None:
        if self._freezer is freezer:
            self._freezer = None

    def _stop_kernel(self) -> None:
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            kernel.discard()
            if self._server is not None:  # it may have been killed for memory since the last command
                self._server.oom_unknown()

    async def snapshot(self) -> Snapshot:
        """Copy the workspace into a checkpoint that sandboxes open copy-on-write (see ``_fork``).

        Raises:
            SandboxCrashed: the sandbox is closed.
            BackendUnavailable: the copy did not fit (raise ``disk_mb``).
        """
        self._check_open()
        if self.view is not None:
            raise InvalidRequest(
                "checkpoints of a sandbox with a root filesystem (rootfs=) are not supported yet: only the "
                "workspace would be carried, not the rest of its root view; fork a sandbox without rootfs=",
                backend=NAME,
                sandbox_id=self.id,
            )
        async with self._lock:  # between commands; a kernel (and its threads) is frozen meanwhile
            self._check_open()
            with frozen(self._freezer):
                return await take_snapshot(
                    self._backend.checkpoints,
                    self.workspace.path,
                    root=self._backend.root,
                    disk_mb=self._backend.disk_mb,
                    mounted=self._iso.tmpfs,
                    sandbox_id=self.id,
                )

    async def start_from(self, snapshot: DirectorySnapshot) -> None:
        """Fill this new, empty sandbox with a checkpoint's files (``SubprocessBackend.open_from``; see ``_fork``).

        Raises:
            BackendUnavailable: the overlay or copy failed (the sandbox is closed then).
        """
        owner = self.workspace.owner
        try:
            merged = await anyio.to_thread.run_sync(
                lambda: fork_into(
                    snapshot, self._base, owner=owner, mounted=self._mounted, disk_mb=self._backend.disk_mb
                )
            )
            if merged is not None:
                self.workspace = Workspace(merged, owner, self.id, mode=_mode_of(merged))
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self.close()
            if isinstance(exc, OSError):
                hint = "raise disk_mb" if exc.errno == errno.ENOSPC else "run `sandboxkit doctor`"
                raise BackendUnavailable(
                    f"cannot fork checkpoint {snapshot.id} into sandbox {self.id}: {exc}; {hint}",
                    backend=NAME,
                    sandbox_id=self.id,
                ) from exc
            raise

    async def alive(self) -> bool:
        """True until closed or discarded (and while the workspace exists). Never raises."""
        if self._closed or self._broken is not None:
            return False
        if self.view is not None:  # the program may remove /testbed: the next call makes it again
            return self.view.mounted
        return os.path.isdir(self.workspace.path)

    async def suspend(self) -> bool:
        """Freeze the kernel, and whatever threads and processes it keeps, with the cgroup freezer.

        Commands leave no process behind and an idle fork server sleeps in a read, so the
        kernel is all that can spend CPU between calls; without one there is nothing to stop.
        """
        return await suspend_freezer(self._freezer)

    async def resume(self) -> None:
        """Thaw what :meth:`suspend` froze."""
        if self._freezer is not None:
            self._freezer.thaw()

    async def reset(self) -> bool:
        """Give the next run what a fresh sandbox gives.

        No process survives a command, so what is left is files in the workspace (wiped by the
        next command's server before its child exists, or here without bwrap; any other operation
        wipes on the host first, see ``_check_open``) and state in the server's namespaces: files in ``/tmp``, ``/dev/shm``, ``/dev/mqueue``
        and SysV IPC objects, which also stay charged to the sandbox's memory. The server
        reports when a command left any; then it is stopped, and the next command starts one
        in fresh namespaces. A sandbox whose server died on its own is not reset (False).
        The report is not waited for when the server is still checking: the next command goes
        out ``fresh``, which the server refuses after a dirty report (the host then restarts it
        and sends the command again), and a server that died meanwhile makes that command raise
        ``SandboxLost`` (nothing ran; a pool runs the call on another sandbox).
        """
        if self._closed or self._broken is not None:
            return False
        self._stop_kernel()  # its variables belong to the last tenant
        async with self._lock:
            if self._server is not None:
                if self.view is not None:
                    await self._server.settle()
                else:
                    # Not waited for when the server is still checking: the next command is
                    # ``fresh``, which the server refuses after a dirty report and which finds a
                    # server dead since then before it runs (``ForkServer.run``).
                    self._server.take_report()
                    self._handover = True
            if self._server is not None and (self._server.dirty or self._server.died):
                if self._server.died:
                    self._discard()
                    return False
                self._server.kill()
                self._server = None
            try:
                if self.view is not None:  # discard the whole upper layer; the server lived in it
                    if self._server is not None:
                        self._server.kill()
                        self._server = None
                    self.view.reset()
                elif self._server_wipes:
                    self._wipe_pending = True  # by the server, off the host's CPU (see ``_check_open``)
                else:
                    self.workspace.wipe()
            except OSError:
                log.warning("could not wipe workspace of %s", self.id, exc_info=True)
                return False
        return True

    async def close(self) -> None:
        """Kill every process of the sandbox and remove its workspace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._backend.forget(self)
        self.release_sync()

    def release_sync(self) -> None:
        """Synchronous teardown, shared by ``close`` and the backend's emergency cleanup."""
        self._closed = True
        self._stop_kernel()
        if self._server is not None:
            self._server.kill()
            self._server = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.view is not None:
            self.view.unmount()
        if self._mounted:
            isolation.unmount(self._base)  # lazy: an overlay inside goes with it
            self._mounted = False
        shutil.rmtree(self._base, ignore_errors=True)
        if self.uid is not None and self._own_uid:
            isolation.release_uid(self.uid)


def _inline_source(name: str, text: str) -> tuple[str, bytes] | None:
    """``name`` and ``text`` as bytes for the child to write; None for text the host must refuse.

    Text that is not valid Unicode (a lone surrogate) goes the host's way, which names the file
    in its ``InvalidRequest``.
    """
    try:
        return name, text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _mode_of(path: str) -> int:
    """The permissions of a directory the host just made (what a wipe gives back; see ``Workspace``)."""
    return stat.S_IMODE(os.stat(path).st_mode)


#: A step streamed to no callback (``Sinks`` of a plain run).
_NO_SINKS: Sinks = (None, None)


@dataclass
class _Step:
    """A step's rlimits and output limits, worked out from its limits, timeout, language and kind.

    A pool's runs repeat the same ``Limits`` object (frozen) and language, and working these out
    again cost every run a few microseconds of the host's CPU.
    """

    limits: Limits
    timeout_s: float
    lang: Language | None
    compiler: bool
    rlimits: list[tuple[int, int]]
    output: OutputLimits

    def fits(self, limits: Limits, timeout_s: float, lang: Language | None, compiler: bool) -> bool:
        return limits is self.limits and timeout_s == self.timeout_s and lang is self.lang and compiler == self.compiler
