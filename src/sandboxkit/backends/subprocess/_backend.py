"""``SubprocessBackend``: sandboxes made of local processes, with no extra dependency.

A sandbox is a workspace directory on the host plus a fork server running inside the
sandbox's namespaces (see ``_isolation``) as the sandbox's private uid. Every command
(compile steps, programs, ``exec``) is forked by that server; Python programs run in the
forked child without ``exec``, which is what makes a warm run cost about a millisecond.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import shutil
import tarfile
import tempfile
from typing import Any, ClassVar

from sandboxkit._watchdog import Lease, ttl_for
from sandboxkit.backends.subprocess import _idmap, _rootfs
from sandboxkit.backends.subprocess import _isolation as isolation
from sandboxkit.backends.subprocess import _seccomp as seccomp
from sandboxkit.backends.subprocess._fork import DirectorySnapshot, check_snapshot
from sandboxkit.backends.subprocess._sandbox import (
    NAME,
    SubprocessSandbox,
)
from sandboxkit.backends.subprocess._workspace import SANDBOX_PATH
from sandboxkit.base import Availability, Backend, Capabilities, Snapshot
from sandboxkit.configs import DEFAULT_PRELOAD, SubprocessConfig
from sandboxkit.errors import BackendUnavailable, InvalidRequest
from sandboxkit.languages import LANGUAGES, Language, file_present
from sandboxkit.models import Limits

__all__ = ["DEFAULT_PRELOAD", "SubprocessBackend", "SubprocessSandbox"]


def _seccomp_supported() -> bool:
    return seccomp.supported()


def _toolchain_present(lang: Language, path: str) -> bool:
    return all(shutil.which(b, path=path) is not None for b in lang.binaries) and all(
        file_present(f) for f in lang.files
    )


#: Top-level directories a sandbox without a root filesystem takes from the host (or replaces):
#: binding the workspace over one would hide the interpreter, its libraries or /proc from the program.
_HOST_DIRS = frozenset(
    {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "run", "sbin", "sys", "tmp",
     "usr", "var"}
)  # fmt: skip


def _check_workdir(workdir: str | None, rootfs: str | None, *, bwrap: bool, root: str | None) -> str:
    """Where programs see their workspace, checked against what the sandbox binds there.

    With ``rootfs`` the directory is inside the image's private view (default ``/testbed``). Without
    one, bubblewrap binds the workspace there instead of :data:`~._isolation.INNER_WORKDIR`, so a
    program file that names ``/testbed/...`` literally finds it; that needs bubblewrap, and the path
    must not hide what the sandbox takes from the host (``/usr``, ``/etc``, ``/tmp``, ...) or the
    directory of the workspaces (``root``; None: not known yet), nor need a mount point inside a
    read-only host directory.

    Raises:
        InvalidRequest: the path is not one a sandbox can show its workspace at.
        BackendUnavailable: no rootfs and no bubblewrap (the workspace is then a host directory).
    """
    if workdir is None:
        return _rootfs.DEFAULT_WORKDIR if rootfs is not None else isolation.INNER_WORKDIR
    checked = workdir  # normalised by SubprocessConfig: absolute, outside /tmp, /dev, /proc and /sys
    if rootfs is not None:
        return checked
    if not bwrap:
        raise BackendUnavailable(
            f"workdir={workdir!r} without rootfs= needs bubblewrap (to bind the workspace there); "
            "install it (apt-get install bubblewrap) or leave workdir out",
            backend=NAME,
        )
    top = "/" + checked.split("/")[1]
    inside_root = root is not None and (
        root == checked or root.startswith(checked + "/") or checked.startswith(root + "/")
    )
    if checked.split("/")[1] in _HOST_DIRS | {""} or inside_root:
        raise InvalidRequest(
            f"workdir={workdir!r} would hide what the sandbox takes from the host ({top}); "
            "choose a directory of its own such as '/testbed'",
            backend=NAME,
        )
    if checked != top and os.path.lexists(top) and not os.path.isdir(checked):
        raise InvalidRequest(
            f"workdir={workdir!r} is inside {top}, which the sandbox shows read-only from the host, "
            "and is not a directory there; choose a new top-level directory such as '/testbed'",
            backend=NAME,
        )
    return checked


def _load_rootfs(source: str, cache: str | None, iso: isolation.Isolation) -> _rootfs.RootImage:
    """Unpack (or find in the cache) the image, after checking this machine can mount views of it."""
    if not iso.is_root or iso.bwrap is None or not iso.tmpfs:
        why = "not running as root" if not iso.is_root else ("no bubblewrap" if iso.bwrap is None else iso.tmpfs_error)
        raise BackendUnavailable(
            f"rootfs= needs root (to mount an overlay per sandbox), bubblewrap and a tmpfs per sandbox; here: {why}. "
            "Run sandboxkit as root with bubblewrap installed (apt-get install bubblewrap), or use the docker backend",
            backend=NAME,
        )
    try:
        return _rootfs.load_image(str(source), cache or _rootfs.default_cache())
    except (OSError, ValueError, tarfile.TarError) as exc:
        raise InvalidRequest(
            f"cannot use rootfs={source!r}: {exc}; give a directory or a tarball (docker export IMAGE > image.tar)",
            backend=NAME,
        ) from exc


class SubprocessBackend(Backend):
    """Runs programs as isolated local processes (namespaces, private uid, cgroups, rlimits).

    Args:
        config: the options, a :class:`~sandboxkit.configs.SubprocessConfig` (each one is
            documented there and in docs/backends/subprocess.md).
        **options: the same options as keywords (``SubprocessBackend(tmp_mb=64)``), validated
            by that model, over ``config`` when both are given.

    Raises:
        InvalidRequest: an option is unknown or invalid (the message names it and the valid ones),
            ``workdir`` would hide a host directory the sandbox uses, or ``rootfs`` cannot be unpacked.
        BackendUnavailable: ``rootfs`` needs what this machine lacks (root, bubblewrap, a tmpfs), or
            ``workdir`` without ``rootfs`` needs bubblewrap.
    """

    name = NAME
    config_model: ClassVar[type[SubprocessConfig]] = SubprocessConfig

    def __init__(self, config: SubprocessConfig | None = None, **options: Any) -> None:
        self.config = config = SubprocessConfig.from_options(config, options)
        self.preload_modules = config.preload_modules
        self.isolation = isolation.probe()
        self.seccomp = config.seccomp and self.isolation.bwrap is not None and _seccomp_supported()
        default_root = os.path.join(tempfile.gettempdir(), f"sandboxkit-{os.geteuid()}")
        self.root = os.path.realpath(config.root or default_root)
        os.makedirs(self.root, mode=0o711, exist_ok=True)
        self.path = config.path or SANDBOX_PATH
        self.warm_python = config.warm_python
        self.disk_mb = config.disk_mb
        self.tmp_mb = config.tmp_mb
        self.server_python = shutil.which("python3", path=self.path)
        rootfs = config.rootfs
        self.workdir = _check_workdir(config.workdir, rootfs, bwrap=self.isolation.bwrap is not None, root=self.root)
        #: The unpacked image every sandbox's root view is made of, or None (the host's filesystem).
        self.rootfs = _load_rootfs(rootfs, config.rootfs_cache, self.isolation) if rootfs is not None else None
        self._toolchains: dict[str, bool] = {}
        self._sandboxes: set[SubprocessSandbox] = set()
        #: Checkpoints taken and not yet released (each leaves it when released).
        self.checkpoints: set[DirectorySnapshot] = set()
        self._caps: Capabilities | None = None
        #: sandboxkit's own modules every fork server runs at start (``preload_python_module``):
        #: name -> (source, this interpreter's bytecode of it).
        self.python_modules: dict[str, tuple[str, bytes]] = {}

    def preload_python_module(self, name: str, source: str) -> bool:
        """Every fork server runs ``source`` as module ``name`` at start, before any program exists.

        Sent compiled (as ``python -OO`` would: no docstrings, no asserts) when the sandbox's interpreter
        reads this interpreter's bytecode, else as source. A server already running gets it at its
        next start: a sandbox restarts a server started without it before its next command (once; the
        module costs every warm slot its definitions, so backends that never grade never carry it).

        Raises:
            InvalidRequest: ``name`` is not an identifier.
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidRequest(f"a preloaded module's name must be an identifier, got {name!r}", backend=NAME)
        if not self.warm_python:
            return False
        known = self.python_modules.get(name)
        if known is None or known[0] != source:
            try:
                code = marshal.dumps(compile(source, f"<{name}>", "exec", dont_inherit=True, optimize=2))
            except (SyntaxError, ValueError):
                code = b""  # each server compiles it and leaves it out the same way; programs find no module
            self.python_modules[name] = (source, code)
        return True

    def has_toolchain(self, lang: Language) -> bool:
        """Whether ``lang``'s binaries are on the sandbox PATH (cached: checked once per backend)."""
        present = self._toolchains.get(lang.name)
        if present is None and self.rootfs is not None:
            present = self._toolchains[lang.name] = all(self.rootfs.has_binary(b, self.path) for b in lang.binaries)
        if present is None:
            present = self._toolchains[lang.name] = _toolchain_present(lang, self.path)
        return present

    @property
    def capabilities(self) -> Capabilities:
        """Languages whose toolchains exist here; protections not active on this machine."""
        if self._caps is None:
            iso = self.isolation
            # With a root filesystem the image decides, as on Docker: a language whose toolchain it
            # lacks raises ToolchainMissing (naming the package), not InvalidRequest.
            langs = frozenset(
                name for name, lang in LANGUAGES.items() if self.rootfs is not None or self.has_toolchain(lang)
            )
            limits = {"timeout_s", "compile_timeout_s", "memory_mb", "output_bytes", "file_size_mb", "pids"}
            if iso.bwrap is not None:
                limits.add("network")
            if iso.cgroup.cpu_parent is not None:
                limits.add("cpus")
            missing = list(iso.missing())
            if iso.bwrap is not None and not self.seccomp:
                missing.append("seccomp filter: off (seccomp=False or an architecture without a syscall table)")
            if self.rootfs is not None:
                if iso.is_root and not _rootfs.gives_own_uids(self.rootfs):
                    missing.append(
                        "separate uid per sandbox: the image cannot be idmapped here (Linux >= 5.19 and a filesystem "
                        "that takes idmapped mounts), so rootfs sandboxes share its owner's host uid and per-user "
                        "kernel quotas (inotify, message queues, pending signals)"
                    )
                    if iso.cgroup.pids_parent is None:
                        missing.append(
                            "process limit: no pids cgroup, and a shared uid makes RLIMIT_NPROC no per-sandbox cap"
                        )
            elif self.server_python is None:
                missing.append("fork server: no python3 on the sandbox PATH; commands start cold, without the cgroup")
            self._caps = Capabilities(
                streaming=True,
                absolute_paths=self.rootfs is not None,
                languages=langs,
                stateful=True,
                network_control=iso.bwrap is not None,
                limits=frozenset(limits),
                resettable=True,
                kernels=self.server_python is not None,
                fork="files" if self.rootfs is None else "none",
                suspend="files+memory",  # the kernel's cgroup freezer (``_freeze``); commands keep no processes
                missing_protections=tuple(missing),
                notes=self._active_protections(),
            )
        return self._caps

    def _active_protections(self) -> tuple[str, ...]:
        """What is in force here, in words (for ``doctor`` and logs)."""
        iso = self.isolation
        out = []
        if iso.is_root:
            out.append("private host uid per sandbox")
        if iso.bwrap:
            extra = ", nested user namespaces disabled" if iso.disable_userns else ""
            out.append(f"bubblewrap {iso.bwrap}: user, pid, mount, ipc, uts and network namespaces{extra}")
        if self.seccomp:
            out.append("seccomp filter: keyring, io_uring, bpf, perf, mount and namespace calls refused")
        cg = iso.cgroup
        out.append(f"cgroup limits: {', '.join(cg.parents()) or 'none'} ({cg.how})")
        if iso.tmpfs:
            out.append(f"workspace on a {self.disk_mb} MB tmpfs")
        if self.rootfs is not None:
            out.append(
                f"root filesystem {self.rootfs.source} (sha256 {self.rootfs.key[:12]}) as a private overlay per "
                f"sandbox, working directory {self.workdir}"
            )
            out.append("fork: not with a root filesystem yet (checkpoints of rootfs sandboxes are refused)")
        elif iso.tmpfs:
            out.append("fork: copy-on-write overlay over a checkpoint's tmpfs (files; no process memory)")
        else:
            out.append("fork: full copies of a checkpoint (mounts refused here; files, no process memory)")
        if self.rootfs is None and self.server_python:
            out.append(f"warm fork server: {self.server_python}")
        return tuple(out)

    async def open(self, limits: Limits | None = None) -> SubprocessSandbox:
        """Create a sandbox: a workspace (tmpfs where allowed), a cgroup, a private uid.

        The fork server starts with the first command, so opening is cheap.

        Raises:
            BackendUnavailable: the workspace or cgroup could not be created.
        """
        try:
            sandbox = SubprocessSandbox(self, limits or Limits())
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot create a sandbox workspace under {self.root!r}: {exc}; check that it is writable", backend=NAME
            ) from exc
        self._sandboxes.add(sandbox)
        # the dead-man switch
        Lease.hold(NAME, self.root, self.owner_ttl_s or ttl_for(None, Limits()), f"{__name__}:remove_dead_owners")
        return sandbox

    async def open_from(self, snapshot: Snapshot, limits: Limits | None = None) -> SubprocessSandbox:
        """Open a sandbox whose workspace is a copy-on-write view of ``snapshot`` (``_fork``).

        Raises:
            InvalidRequest: the snapshot is another backend object's, or released.
            BackendUnavailable: the workspace or its overlay could not be made.
        """
        checkpoint = check_snapshot(self.checkpoints, snapshot)
        sandbox = await self.open(limits)
        await sandbox.start_from(checkpoint)
        return sandbox

    @property
    def live_snapshots(self) -> int:
        """Checkpoints taken by this backend object and not yet released."""
        return len(self.checkpoints)

    def forget(self, sandbox: SubprocessSandbox) -> None:
        """``sandbox`` closed itself: it is no longer this backend's to tear down."""
        self._sandboxes.discard(sandbox)

    @property
    def live_sandboxes(self) -> int:
        """Sandboxes opened by this backend object and not yet closed."""
        return len(self._sandboxes)

    async def aclose(self) -> None:
        """Close every sandbox this backend opened."""
        for sandbox in list(self._sandboxes):
            await sandbox.close()
        for snap in list(self.checkpoints):
            await snap.release()
        _idmap.reap_helpers()  # the last idmapping helper of an open or fork is reaped lazily; not past close

    def emergency_cleanup(self) -> None:
        """Kill and remove every sandbox synchronously (interpreter exit)."""
        for sandbox in list(self._sandboxes):
            with contextlib.suppress(Exception):
                sandbox.release_sync()
        self._sandboxes.clear()
        for snap in list(self.checkpoints):
            snap.release_sync()

    async def cleanup(self) -> int:
        """Remove workspaces, mounts and cgroups left by crashed sandboxkit processes.

        Only entries whose owner process is gone are touched: this removes what a crash
        left, never another live process's sandboxes (those are in use).
        """
        from sandboxkit.backends.subprocess._cleanup import remove_leftovers

        live = {sb.workspace.path for sb in self._sandboxes}
        return remove_leftovers(self.root, self.isolation, keep=live)

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Always usable: it needs only this machine (``doctor`` lists protections missing here)."""
        del options
        return Availability(True)


def remove_dead_owners(root: str) -> None:
    """The dead-man switch's cleanup (:mod:`sandboxkit._watchdog`): what dead owners left under ``root``."""
    from sandboxkit.backends.subprocess._cleanup import remove_leftovers

    remove_leftovers(root, isolation.probe(), keep=set())
