"""A scriptable, failure-injecting backend for testing code that *uses* sandboxkit.

As httpx ships ``MockTransport``, sandboxkit ships :class:`FakeBackend`: a plugin or adapter
author tests retries, deadlines, capacity handling and reward mapping without a sandbox. It
executes nothing. The program text is a tiny script of behaviours, so a test states what
each call does:

* ``"ok"`` (or anything else): status ok, stdout echoes the code
* ``"sleep:S"``: wait S seconds, then ok
* ``"fail"``: the program "exits 1" (a model failure: a result, never retried)
* ``"transient:N"`` / ``"ratelimit:N"``: raise Transient / RateLimited for the first N attempts of this code
* ``"crash"``: raise SandboxCrashed (the sandbox vanished); ``"unhealthy"``: ok, but ``alive()`` is False after
* ``"bug"``: raise RuntimeError (a backend bug)

``responses`` scripts exact answers instead: code -> a :class:`~sandboxkit.models.RunResult`, an
exception to raise, or a function of the request. ``capacity`` models a service that holds at most
that many sandboxes at once (those being created count) and refuses more with
:class:`~sandboxkit.errors.CapacityExceeded`, as Daytona's quota answer and E2B's concurrent-sandbox
429 are mapped; set ``backend.capacity`` later to raise or lower it.

It records what was done to it: calls in flight and their peak, creation times, open sandboxes
and their peak, attempts per code, capacity refusals, resets. With ``marker_dir`` every open
sandbox is a file there, so another process can see leaks after this one is killed.

Its contract behaviour (documented errors, lifecycle, files) is the real one: it passes
:class:`~sandboxkit.testing.BackendConformance` except where a test needs code to execute
(sandboxkit's own ``tests/unit/test_testing_fake.py`` holds it to that).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import anyio

from sandboxkit._request import renamed
from sandboxkit.base import Backend, Capabilities
from sandboxkit.errors import CapacityExceeded, InvalidRequest, RateLimited, SandboxCrashed, Transient
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult, Status, check_relative_path
from sandboxkit.streaming import BufferedSandbox

__all__ = ["FakeBackend", "FakeSandbox", "Response"]

#: What ``responses`` maps a program's code to.
Response = RunResult | BaseException | Callable[[RunRequest], RunResult | Awaitable[RunResult]]

_ids = itertools.count()


class FakeSandbox(BufferedSandbox):
    """One fake sandbox: a dict of files and a script interpreter."""

    def __init__(self, backend: FakeBackend, limits: Limits | None) -> None:
        self.backend = backend
        self.backend_name = backend.name
        self.limits = limits or Limits()
        self.id = f"fake-{os.getpid()}-{next(_ids)}"
        self.files: dict[str, bytes] = {}
        self.closed = False
        self.healthy = True
        if backend.marker_dir:
            (Path(backend.marker_dir) / self.id).write_text("open")

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxCrashed(
                "sandbox already closed; open a new one", backend=self.backend_name, sandbox_id=self.id
            )

    def _path(self, path: str) -> str:
        try:
            return check_relative_path(path)
        except ValueError as exc:
            raise InvalidRequest(str(exc), backend=self.backend_name, sandbox_id=self.id) from exc

    async def _run_buffered(self, request: RunRequest) -> RunResult:
        self._check_open()
        if request.language not in self.backend.capabilities.languages:
            raise InvalidRequest(
                f"language {request.language!r} is not supported by the fake backend; "
                f"use one of {sorted(self.backend.capabilities.languages)!r}",
                backend=self.backend_name,
                sandbox_id=self.id,
            )
        for path, data in request.files.items():
            self.files[path] = data
        result = await self._behave(request.code, request.language, request)
        fetched = {p: self.files[p] for p in request.fetch_files if p in self.files}
        return result.model_copy(update={"files": fetched}) if fetched else result

    async def _behave(self, code: str, language: str = "python", request: RunRequest | None = None) -> RunResult:
        b = self.backend
        self._check_open()
        b.attempts[code] += 1
        b.in_flight += 1
        b.peak_in_flight = max(b.peak_in_flight, b.in_flight)
        try:
            if code in b.responses:
                return await self._respond(b.responses[code], request or RunRequest(code=code, language=language))
            kind, _, arg = code.partition(":")
            if kind == "sleep":
                await anyio.sleep(float(arg))
            elif kind in ("transient", "ratelimit") and b.attempts[code] <= int(arg):
                if kind == "transient":
                    raise Transient("injected transient fault", backend=b.name, sandbox_id=self.id)
                raise RateLimited("injected 429", backend=b.name, sandbox_id=self.id, retry_after=0.01)
            elif kind == "crash":
                self.healthy = False
                raise SandboxCrashed("injected crash", backend=b.name, sandbox_id=self.id)
            elif kind == "unhealthy":
                self.healthy = False
            elif kind == "bug":
                raise RuntimeError("injected backend bug")
            failed = kind == "fail"
            return RunResult(
                status=Status.FAILED if failed else Status.OK,
                exit_code=1 if failed else 0,
                stdout=code,
                language=language,
                backend=b.name,
                sandbox_id=self.id,
            )
        finally:
            b.in_flight -= 1

    async def _respond(self, response: Response, request: RunRequest) -> RunResult:
        if isinstance(response, BaseException):
            raise response
        if isinstance(response, RunResult):
            return response
        got = response(request)
        return await got if isinstance(got, Awaitable) else got

    async def _exec_buffered(self, request: ExecRequest) -> ExecResult:
        self._check_open()
        command, cwd = request.command, request.cwd
        if cwd is not None and cwd not in ("", "."):
            self._path(cwd)
        result = await self._behave(command if isinstance(command, str) else " ".join(command))
        return ExecResult(status=result.status, exit_code=result.exit_code, stdout=result.stdout)

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        checked = {self._path(path): data for path, data in files.items()}
        self._check_open()
        for path, data in checked.items():
            self.files[path] = data.encode() if isinstance(data, str) else data

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        checked = [self._path(p) for p in paths]
        self._check_open()
        return {p: self.files[p] for p in checked if p in self.files}

    async def alive(self) -> bool:
        return not self.closed and self.healthy

    async def reset(self) -> bool:
        if self.closed or not self.healthy:
            return False
        self.files.clear()
        self.backend.resets += 1
        return True

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):  # close completes under cancellation (the contract)
            await anyio.sleep(self.backend.close_delay_s)
        self.backend.live.discard(self)
        if self.backend.marker_dir:
            (Path(self.backend.marker_dir) / self.id).unlink(missing_ok=True)


class FakeBackend(Backend):
    """A backend whose sandboxes run scripts of behaviours (see the module docstring).

    Args:
        open_delay_s: seconds every ``open`` takes (a slow service).
        close_delay_s: seconds every ``close`` takes.
        open_failures: the first N ``open`` calls raise ``open_error``.
        open_error: the exception class (or factory taking the message) of those failures.
        capacity: the most sandboxes the "service" holds at once (creations in progress count);
            more raise ``CapacityExceeded``. ``None``: unlimited.
        responses: code -> a result, an exception to raise, or a function of the request.
        languages: languages it claims to run (every other one is an ``InvalidRequest``).
        stateful: whether it claims files persist across calls (they always do in the fake).
        resettable: whether ``reset`` is offered to the pool.
        marker_dir: a directory holding one file per open sandbox.
        name: the backend name reported in results and errors.
        open_delay, close_delay: the deprecated old names of ``open_delay_s`` / ``close_delay_s``.
    """

    def __init__(
        self,
        *,
        open_delay_s: float = 0.0,
        close_delay_s: float = 0.0,
        open_failures: int = 0,
        open_error: Callable[[str], BaseException] = Transient,
        capacity: int | None = None,
        responses: Mapping[str, Response] | None = None,
        languages: frozenset[str] = frozenset({"python", "bash"}),
        stateful: bool = True,
        resettable: bool = True,
        marker_dir: str | None = None,
        name: str = "fake",
        open_delay: float | None = None,
        close_delay: float | None = None,
    ) -> None:
        self.name = name
        self.open_delay_s = (
            open_delay_s if open_delay is None else renamed(None, open_delay, "open_delay", where="FakeBackend")
        )
        self.close_delay_s = (
            close_delay_s if close_delay is None else renamed(None, close_delay, "close_delay", where="FakeBackend")
        )
        self.open_failures = open_failures
        self.open_error = open_error
        self.capacity = capacity
        self._opening = 0
        self.responses: dict[str, Response] = dict(responses or {})
        self.marker_dir = marker_dir
        self._capabilities = Capabilities(
            languages=languages, stateful=stateful, resettable=resettable, limits=frozenset({"timeout_s"})
        )
        self.in_flight = 0
        self.peak_in_flight = 0
        self.live: set[FakeSandbox] = set()
        self.peak_live = 0
        self.created_at: list[float] = []
        self.opens_attempted = 0
        self.capacity_refusals = 0
        self.resets = 0
        self.attempts: Counter[str] = Counter()

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def open(self, limits: Limits | None = None) -> FakeSandbox:
        self.opens_attempted += 1
        if self.opens_attempted <= self.open_failures:
            raise self.open_error("injected open failure")
        if self.capacity is not None and len(self.live) + self._opening >= self.capacity:
            self.capacity_refusals += 1
            raise CapacityExceeded(
                f"maximum number of concurrent sandboxes ({self.capacity}) reached "
                f"({len(self.live)} open, {self._opening} being created); close one or wait",
                backend=self.name,
                limit=self.capacity,
            )
        self._opening += 1  # a sandbox being created already counts against the service's limit
        try:
            await anyio.sleep(self.open_delay_s)
        finally:
            self._opening -= 1
        self.created_at.append(time.monotonic())
        sb = FakeSandbox(self, limits)
        self.live.add(sb)
        self.peak_live = max(self.peak_live, len(self.live))
        return sb
