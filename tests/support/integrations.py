"""Helpers for the trainer-adapter tests: a backend that is down, backend availability, leak checks."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess

from sandboxkit import Backend, BackendUnavailable, Capabilities, Limits, Sandbox
from support.procs import pids, proc_stat


class DownBackend(Backend):
    """A backend whose service is unreachable: every ``open`` fails like a dead engine would."""

    name = "down"

    def __init__(self) -> None:
        self.opens = 0

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python", "bash"}))

    async def open(self, limits: Limits | None = None) -> Sandbox:
        self.opens += 1
        raise BackendUnavailable("the sandbox service is unreachable (injected)", backend=self.name)


def docker_backend_present() -> bool:
    """The Docker backend module exists here (it is written in parallel with these adapters)."""
    try:
        return importlib.util.find_spec("sandboxkit.backends.docker") is not None and hasattr(
            importlib.import_module("sandboxkit.backends.docker"), "DockerBackend"
        )
    except Exception:
        return False


def docker_engine_up() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def descendant_processes() -> set[int]:
    """PIDs of every process descended from this one (sandbox servers, programs), to spot leaks."""
    children: dict[int, list[int]] = {}
    for pid in pids():
        st = proc_stat(pid)
        if st is not None:
            children.setdefault(st.ppid, []).append(pid)
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
