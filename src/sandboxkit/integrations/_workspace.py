"""A ``/testbed``-style layout on any backend.

Agent datasets (SWE-style, LLM-in-Sandbox) tell the model its files live under a fixed
absolute directory such as ``/testbed``. A Docker sandbox could put the workspace there; a
subprocess sandbox lives in a temporary directory; a cloud sandbox has its own home. The
model should not notice: :class:`WorkspaceMap` maps the advertised directory onto the real
workspace in paths and commands going in, and back in the text coming out.
"""

from __future__ import annotations

import posixpath
import re

from sandboxkit.models import check_relative_path

__all__ = ["WorkspaceMap"]


class WorkspaceMap:
    """Translates between the advertised directory (``workdir``) and the real workspace.

    Args:
        workdir: the absolute directory the model is told about (``/testbed``).
        outside: what to do with an absolute path outside ``workdir``: ``"reject"`` (tools that
            write through the backend API can only reach the workspace) or ``"rebase"`` (strip
            the leading ``/`` and put it inside the workspace, like rLLM's local sandbox).
    """

    def __init__(self, workdir: str = "/testbed", *, outside: str = "reject") -> None:
        if not workdir.startswith("/"):
            raise ValueError(f"workdir must be an absolute path like '/testbed', got {workdir!r}")
        self.workdir = posixpath.normpath(workdir)
        self.outside = outside
        self.real: str | None = None
        self._in: re.Pattern[str] | None = None

    def bind(self, real_path: str) -> None:
        """Record where the workspace really is (``pwd`` inside the sandbox)."""
        real = posixpath.normpath(real_path.strip()) if real_path.strip() else None
        self.real = real
        if real and real != self.workdir and self.workdir != "/":
            # Replace the advertised directory only where it is a whole path component.
            self._in = re.compile(re.escape(self.workdir) + r"(?=$|[/\s'\"`;:|&<>()=,])")
        else:
            self._in = None

    def relative(self, path: str) -> str:
        """A workspace-relative path for ``path`` (absolute under ``workdir``, or relative).

        Raises:
            ValueError: the path is empty, escapes the workspace, or lies outside ``workdir``
                while ``outside="reject"`` (the message is meant for the model).
        """
        if not isinstance(path, str) or not path.strip():
            raise ValueError("a path is required")
        path = path.strip()
        if path.startswith("/"):
            norm = posixpath.normpath(path)
            if norm == self.workdir:
                raise ValueError(f"{path!r} is the working directory itself; give a file inside it")
            prefix = self.workdir.rstrip("/") + "/"
            if norm.startswith(prefix):
                path = norm[len(prefix) :]
            elif self.real and norm.startswith(self.real.rstrip("/") + "/"):
                path = norm[len(self.real.rstrip("/")) + 1 :]
            elif self.outside == "rebase":
                path = norm.lstrip("/")
            else:
                raise ValueError(f"{path!r} is outside the working directory {self.workdir}; use a path inside it")
        return check_relative_path(path)

    def is_root(self, path: object) -> bool:
        """Whether ``path`` names the working directory itself (``/testbed``, ``.``, ``/testbed/``)."""
        if not isinstance(path, str) or not path.strip():
            return False
        norm = posixpath.normpath(path.strip())
        return norm in (self.workdir, ".") or (self.real is not None and norm == self.real)

    def display(self, relative: str) -> str:
        """The absolute path the model knows for a workspace-relative path."""
        return self.workdir if relative in (".", "") else posixpath.join(self.workdir, relative)

    def command(self, command: str) -> str:
        """``command`` with the advertised directory replaced by the real one."""
        if self._in is None or self.real is None:
            return command
        real = self.real
        return self._in.sub(lambda _m: real, command)

    def output(self, text: str) -> str:
        """``text`` with the real workspace path shown as the advertised directory."""
        if self._in is None or not self.real:
            return text
        return text.replace(self.real, self.workdir)
