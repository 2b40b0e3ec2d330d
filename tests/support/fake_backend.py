"""A failure-injecting backend for testing the pool (no real sandbox behind it).

The program text is a tiny script of behaviours, so a test states what each call does:

* ``"ok"`` (or anything else): status ok, stdout echoes the code
* ``"sleep:S"``: wait S seconds, then ok
* ``"fail"``: the program "exits 1" (a model failure: a result, never retried)
* ``"transient:N"`` / ``"ratelimit:N"``: raise Transient / RateLimited for the first N attempts of this code
* ``"crash"``: raise SandboxCrashed (the sandbox vanished)
* ``"bug"``: raise RuntimeError (a backend bug)

With ``capacity=N`` it is a service limited to N concurrent sandboxes: an ``open`` beyond that
raises :class:`CapacityExceeded` (as Daytona's quota 403 and E2B's concurrent-sandbox 429 are
mapped), counted in ``capacity_refusals``; set ``backend.capacity`` later to raise or lower it.

It records what the pool did to it: calls in flight and their peak, creation times, open
sandboxes and their peak, attempts per code. With ``marker_dir`` every open sandbox is a
file there, so another process can see leaks after this one is killed.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

from sandboxkit import Backend, Capabilities, ExecResult, Limits, RunRequest, RunResult, Sandbox, Status
from sandboxkit.errors import CapacityExceeded, InvalidRequest, RateLimited, SandboxCrashed, Transient
from sandboxkit.models import check_relative_path

_ids = itertools.count()


class FakeSandbox(Sandbox):
    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.backend_name = "fake"
        self.id = f"fake-{os.getpid()}-{next(_ids)}"
        self.files: dict[str, bytes] = {}
        self.closed = False
        self.healthy = True
        if backend.marker_dir:
            (Path(backend.marker_dir) / self.id).write_text("open")

    async def run(self, request: RunRequest) -> RunResult:
        return await self._behave(request.code, request.language)

    async def _behave(self, code: str, language: str = "python") -> RunResult:
        b = self.backend
        if self.closed:
            raise SandboxCrashed("sandbox already closed", backend="fake", sandbox_id=self.id)
        b.attempts[code] += 1
        b.in_flight += 1
        b.peak_in_flight = max(b.peak_in_flight, b.in_flight)
        try:
            kind, _, arg = code.partition(":")
            if kind == "sleep":
                await anyio.sleep(float(arg))
            elif kind in ("transient", "ratelimit") and b.attempts[code] <= int(arg):
                if kind == "transient":
                    raise Transient("injected transient fault", backend="fake", sandbox_id=self.id)
                raise RateLimited("injected 429", backend="fake", sandbox_id=self.id, retry_after=0.01)
            elif kind == "crash":
                raise SandboxCrashed("injected crash", backend="fake", sandbox_id=self.id)
            elif kind == "bug":
                raise RuntimeError("injected backend bug")
            status = Status.FAILED if kind == "fail" else Status.OK
            return RunResult(
                status=status,
                exit_code=1 if kind == "fail" else 0,
                stdout=code,
                language=language,
                backend="fake",
                sandbox_id=self.id,
            )
        finally:
            b.in_flight -= 1

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        result = await self._behave(command if isinstance(command, str) else " ".join(command))
        return ExecResult(status=result.status, exit_code=result.exit_code, stdout=result.stdout)

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        for path, data in files.items():
            try:
                path = check_relative_path(path)
            except ValueError as exc:
                raise InvalidRequest(str(exc), backend="fake") from exc
            self.files[path] = data.encode() if isinstance(data, str) else data

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return {p: self.files[p] for p in paths if p in self.files}

    async def alive(self) -> bool:
        return not self.closed and self.healthy

    async def reset(self) -> bool:
        self.files.clear()
        self.backend.resets += 1
        return True

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await anyio.sleep(self.backend.close_delay)
        self.backend.live.discard(self)
        if self.backend.marker_dir:
            (Path(self.backend.marker_dir) / self.id).unlink(missing_ok=True)


class FakeBackend(Backend):
    name = "fake"

    def __init__(
        self,
        *,
        open_delay: float = 0.0,
        close_delay: float = 0.0,
        open_failures: int = 0,
        open_error: type[Exception] = Transient,
        marker_dir: str | None = None,
        capacity: int | None = None,
    ) -> None:
        self.capacity = capacity
        self.capacity_refusals = 0
        self._opening = 0
        self.open_delay = open_delay
        self.close_delay = close_delay
        self.open_failures = open_failures
        self.open_error = open_error
        self.marker_dir = marker_dir
        self.in_flight = 0
        self.peak_in_flight = 0
        self.live: set[FakeSandbox] = set()
        self.peak_live = 0
        self.created_at: list[float] = []
        self.opens_attempted = 0
        self.resets = 0
        self.attempts: Counter[str] = Counter()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python", "bash"}), stateful=True, resettable=True)

    async def open(self, limits: Limits | None = None) -> Sandbox:
        self.opens_attempted += 1
        if self.opens_attempted <= self.open_failures:
            raise self.open_error("injected open failure")
        if self.capacity is not None and len(self.live) + self._opening >= self.capacity:
            self.capacity_refusals += 1
            raise CapacityExceeded(
                f"maximum number of concurrent sandboxes ({self.capacity}) reached",
                backend="fake",
                limit=self.capacity,
            )
        self._opening += 1  # a sandbox being created already counts against the service's limit
        try:
            await anyio.sleep(self.open_delay)
        finally:
            self._opening -= 1
        self.created_at.append(time.monotonic())
        sb = FakeSandbox(self)
        self.live.add(sb)
        self.peak_live = max(self.peak_live, len(self.live))
        return sb
