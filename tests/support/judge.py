"""Helpers for the judge tests: availability marks, a recording wrapper of the real backend, a broken backend."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sandboxkit import Backend, Capabilities, ExecResult, Limits, RunRequest, RunResult, Sandbox, SandboxPool
from sandboxkit.errors import BackendUnavailable
from sandboxkit.judge._harness_isolated import CODEC, IMPORTS
from sandboxkit.registry import available_backends
from support.marks import requires

ROOT = Path(__file__).resolve().parents[2]


def _subprocess_usable() -> bool:
    spec = available_backends().get("subprocess")
    return spec is not None and spec.availability().usable


needs_subprocess = requires(_subprocess_usable(), "the subprocess backend is not usable here")
needs_gpp = requires(shutil.which("g++") is not None, "g++ is not installed")
needs_java = requires(shutil.which("javac") is not None, "a JDK is not installed")
needs_node = requires(shutil.which("node") is not None, "node is not installed")

#: Short limits: grading tests should not wait on long timeouts.
FAST = Limits(timeout_s=5.0, memory_mb=512)


@asynccontextmanager
async def pool_over(backend: Backend, max_concurrency: int) -> AsyncIterator[SandboxPool]:
    """A pool on ``backend`` with :data:`FAST` limits; the backend is closed after it, whatever happened."""
    try:
        async with SandboxPool(backend, max_concurrency=max_concurrency, limits=FAST) as p:
            yield p
    finally:
        await backend.aclose()


class RecordingSandbox(Sandbox):
    """Delegates to a real sandbox and records every run/exec request (to count sandbox calls)."""

    def __init__(self, inner: Sandbox, log: list[RunRequest | str]) -> None:
        self.inner = inner
        self.log = log
        self.id = inner.id
        self.backend_name = inner.backend_name

    async def run(self, request: RunRequest) -> RunResult:
        self.log.append(request)
        return await self.inner.run(request)

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        self.log.append(command if isinstance(command, str) else " ".join(command))
        return await self.inner.exec(command, cwd=cwd, env=env, stdin=stdin, timeout=timeout)

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        await self.inner.write_files(files)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return await self.inner.read_files(paths)

    async def alive(self) -> bool:
        return await self.inner.alive()

    async def reset(self) -> bool:
        return await self.inner.reset()

    async def close(self) -> None:
        await self.inner.close()


class RecordingBackend(Backend):
    """The real subprocess backend, with a log of what the judge asked it to run."""

    def __init__(self) -> None:
        from sandboxkit.registry import backend

        self.inner = backend("subprocess")
        self.name = self.inner.name
        self.log: list[RunRequest | str] = []

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    async def open(self, limits: Limits | None = None) -> Sandbox:
        return RecordingSandbox(await self.inner.open(limits), self.log)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def runs(self, language: str | None = None) -> list[RunRequest]:
        return [r for r in self.log if isinstance(r, RunRequest) and (language is None or r.language == language)]


class BrokenBackend(Backend):
    """A backend whose service is down: every open raises BackendUnavailable (an infrastructure failure)."""

    name = "broken"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python", "cpp", "bash", "javascript", "java"}))

    async def open(self, limits: Limits | None = None) -> Sandbox:
        raise BackendUnavailable("the sandbox service is down (injected)", backend=self.name)


def codec_namespace() -> dict[str, Any]:
    """The isolated harness's value codec, run on its own (what the ``codec`` fixture holds)."""
    ns: dict[str, Any] = {"__name__": "codec"}
    exec(compile(IMPORTS + CODEC, "<codec>", "exec"), ns)
    return ns


def codec_roundtrip(codec: dict[str, Any], value: Any) -> Any:
    """``value`` encoded, sent as the wire's JSON and decoded, as between the solution and the checker.

    Objects that are not data become handles that come back as the object itself.
    """
    handles: list[Any] = []

    def other(o: Any) -> list[Any]:
        handles.append(o)
        return ["h", len(handles) - 1]

    wire = codec["_dumps"](codec["_enc"](value, other))
    return codec["_dec"](codec["_loads"](wire), lambda n: handles[n[1]])
