"""Where the model's paths live in an rLLM episode's sandbox.

The model is told its files are in a working directory (``/testbed``). Where a backend can, the
directory is real: :func:`real_workdir_options` asks Docker for a writable root and the subprocess
backend to show its workspace there (bubblewrap binds it at ``workdir=``), so a program file that
names ``/testbed/...`` literally finds its files. On a backend with its own root filesystem where
that directory exists and is writable, commands run there and files go to their real absolute
paths. Elsewhere the directory is mapped onto the sandbox's workspace, in commands and in output
(:class:`~sandboxkit.integrations._workspace.WorkspaceMap`); where the workspace already *is* the
directory, that mapping is the identity. This module decides which, once per episode, and turns
the model's paths into the paths the backend's file API takes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

from sandboxkit.errors import SandboxkitError
from sandboxkit.integrations._llm_in_sandbox import Layout
from sandboxkit.integrations._runtime import BackendLike
from sandboxkit.integrations._workspace import WorkspaceMap
from sandboxkit.models import ExecResult

__all__ = ["EpisodePaths", "real_workdir_options"]


def real_workdir_options(
    backend: BackendLike, options: Mapping[str, Any] | None, layout: Layout
) -> Mapping[str, Any] | None:
    """Backend options that make the advertised working directory a real, writable one.

    Only for a backend named as a string whose options leave the choice open. ``docker``: a
    writable root with the layout's directories. ``subprocess``: ``workdir=`` the working
    directory, where this machine's sandboxes can show the workspace there (bubblewrap, a path
    that hides nothing of the host's); elsewhere the options stay as given and the directory is
    mapped, as before.
    """
    if backend == "docker" and not (options and "writable_root" in options):
        dirs = dict.fromkeys([layout.working_dir, layout.input_dir, layout.output_dir])
        return {**dict(options or {}), "writable_root": True, "writable_dirs": tuple(dirs)}
    if backend == "subprocess" and not (options and "workdir" in options):
        # Imported here: the subprocess backend is Linux-only, and building an env opens nothing.
        from sandboxkit.backends.subprocess._backend import _check_workdir
        from sandboxkit.backends.subprocess._isolation import probe

        rootfs = (options or {}).get("rootfs")
        try:
            _check_workdir(layout.working_dir, rootfs, bwrap=probe().bwrap is not None, root=None)
        except SandboxkitError:
            return options
        return {**dict(options or {}), "workdir": layout.working_dir}
    return options


class EpisodePaths:
    """The path mapping of one episode.

    Args:
        workspace: the advertised working directory and its mapping.
        absolute_paths: whether the backend has a root filesystem of its own (asked lazily, so
            building an environment opens no pool).

    Attributes:
        cwd: the real working directory where commands run, or None when it is mapped.
    """

    def __init__(self, workspace: WorkspaceMap, absolute_paths: Callable[[], bool]) -> None:
        self.workspace = workspace
        self._absolute_paths = absolute_paths
        self.cwd: str | None = None

    def bind(self, run: Callable[[str], ExecResult]) -> None:
        """Use the real working directory where the sandbox has one, else map it onto the workspace.

        ``run`` runs a shell command in the episode's sandbox (in its default directory).
        """
        self.cwd = None
        workdir = self.workspace.workdir
        if self._absolute_paths():
            quoted = "'" + workdir.replace("'", "'\\''") + "'"
            if run(f"test -d {quoted} && test -w {quoted}").ok:
                self.cwd = workdir
                self.workspace.bind(workdir)
                return
        self.bind_to_workspace(run)

    def bind_to_workspace(self, run: Callable[[str], ExecResult]) -> None:
        """Map the working directory onto the sandbox's workspace (a fork's files are there)."""
        self.cwd = None
        self.workspace.bind(run("pwd").stdout)

    def sandbox_path(self, absolute: str) -> str:
        """The path the backend's file API takes for an absolute path of the task's layout.

        Inside the working directory: relative to the workspace (every backend). Elsewhere:
        the absolute path itself, on a backend with its own root filesystem.

        Raises:
            ValueError: the path is outside the working directory and the backend has no
                root filesystem of its own.
        """
        try:
            return self.workspace.relative(absolute)
        except ValueError:
            if self._absolute_paths():
                return absolute
            raise

    def fs_path(self, rel: str) -> str:
        """The path the file API takes: absolute under the real working directory, else as given."""
        return posixpath.join(self.cwd, rel) if self.cwd is not None else rel
