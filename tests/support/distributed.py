"""A sleep backend that records what the cluster did to it, and the worker actor the tests drive.

Ray workers import this module by name (``support.distributed``): the test's Ray fixture puts
``tests/`` on the workers' ``PYTHONPATH``.

* :class:`SleepBackend`: ``run`` sleeps (``"sleep:S"`` or ``sleep_s``) and reports to a
  :class:`Recorder` actor on entry and exit, awaiting both, so the recorder's count is
  exactly the number of runs between those points across every process: a run's exit is
  recorded before its call slot is released, and the next run's entry after its grant.
* :class:`Recorder`: a plain (one call at a time) Ray actor holding the cluster-wide
  in-flight count, its peak, and the time of every sandbox creation.
* :class:`PoolWorker`: an async Ray actor owning one ``SandboxPool``, like a verl reward worker.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sandboxkit import Backend, Capabilities, ExecResult, Limits, RunRequest, RunResult, Sandbox, SandboxPool, Status

TEST_NAMESPACE = "sandboxkit-tests"
#: ``tests/``: the folder that makes ``support.distributed`` importable in Ray workers.
HERE = str(Path(__file__).resolve().parents[1])
_ids = itertools.count()


def worker_env() -> dict[str, Any]:
    """Runtime env that lets Ray workers import this module (``support.distributed``)."""
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def recorder(name: str) -> Any:
    import ray

    return ray.get_actor(name, namespace=TEST_NAMESPACE)


class Recorder:
    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.runs = 0
        self.opens: list[float] = []
        self.intervals: list[tuple[float, float]] = []

    def enter(self) -> None:
        self.in_flight += 1
        self.runs += 1
        self.peak = max(self.peak, self.in_flight)

    def exit(self) -> None:
        self.in_flight -= 1

    def opened(self, at: float) -> None:
        self.opens.append(at)

    def snapshot(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight, "peak": self.peak, "runs": self.runs, "opens": sorted(self.opens)}


class SleepSandbox(Sandbox):
    def __init__(self, backend: SleepBackend) -> None:
        self.backend = backend
        self.backend_name = backend.name
        self.id = f"sleep-{os.getpid()}-{next(_ids)}"
        self.closed = False

    async def run(self, request: RunRequest) -> RunResult:
        kind, _, arg = request.code.partition(":")
        seconds = float(arg) if kind == "sleep" else self.backend.sleep_s
        rec = self.backend.recorder
        if rec is not None:
            await rec.enter.remote()
        started = time.time()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.backend.intervals.append((started, time.time()))
            if rec is not None:
                await rec.exit.remote()
        return RunResult(
            status=Status.OK, exit_code=0, stdout=request.code, backend=self.backend_name, sandbox_id=self.id
        )

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        return ExecResult(status=Status.OK, exit_code=0, stdout=str(command))

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        return None

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return {}

    async def alive(self) -> bool:
        return not self.closed

    async def reset(self) -> bool:
        return not self.closed

    async def close(self) -> None:
        self.closed = True


class SleepBackend(Backend):
    """Sandboxes whose runs only sleep; ``recorder`` names a :class:`Recorder` actor (or None)."""

    def __init__(self, name: str = "sleep", sleep_s: float = 0.05, recorder: str | None = None) -> None:
        self.name = name
        self.sleep_s = sleep_s
        self.recorder_name = recorder
        self._recorder: Any = None
        self.intervals: list[tuple[float, float]] = []
        self.opened = 0

    @property
    def recorder(self) -> Any:
        if self.recorder_name and self._recorder is None:
            self._recorder = recorder(self.recorder_name)
        return self._recorder

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python"}), resettable=True)

    async def open(self, limits: Limits | None = None) -> SleepSandbox:
        self.opened += 1
        if self.recorder is not None:
            await self.recorder.opened.remote(time.time())
        return SleepSandbox(self)


class PoolWorker:
    """An async Ray actor owning one pool, like one of verl's reward workers."""

    def __init__(self) -> None:
        self.backend: SleepBackend | None = None
        self.pool: SandboxPool | None = None
        self.background: list[asyncio.Task[Any]] = []

    async def setup(
        self, backend: dict[str, Any], pool: dict[str, Any], limiter_options: dict[str, Any] | None = None
    ) -> str:
        """(Re)build the pool; ``limiter_options`` builds a Ray limiter with those options instead of "ray"."""
        await self.stop()
        self.backend = SleepBackend(**backend)
        pool = dict(pool)
        if limiter_options is not None:
            from sandboxkit.distributed import ray_limiter

            cap = pool["max_concurrency"]
            pool["limiter"] = ray_limiter(
                cap,
                pool.get("max_sandboxes", cap),
                pool.get("creation_rate"),
                pool.get("creation_burst"),
                backend=self.backend.name,
                **limiter_options,
            )
        self.pool = SandboxPool(self.backend, **pool)
        await self.pool.start()
        return type(self.pool._limiter).__name__

    async def run_many(self, n: int, code: str = "sleep:0.05", start_at: float | None = None) -> dict[str, Any]:
        """Run ``n`` calls at once; ``start_at`` (a ``time.time()``) lines several workers up."""
        assert self.pool is not None
        if start_at is not None:
            await asyncio.sleep(max(0.0, start_at - time.time()))
        started = time.time()
        results = await self.pool.run_many([{"code": code} for _ in range(n)])
        return {
            "ok": sum(1 for r in results if isinstance(r, RunResult) and r.status == Status.OK),
            "errors": [repr(r) for r in results if not isinstance(r, RunResult)],
            "started": started,
            "finished": time.time(),
        }

    async def run_in_background(self, n: int, code: str) -> None:
        assert self.pool is not None
        for _ in range(n):
            self.background.append(asyncio.get_running_loop().create_task(self.pool.run(code)))

    async def intervals(self) -> list[tuple[float, float]]:
        assert self.backend is not None
        return list(self.backend.intervals)

    async def stop(self) -> None:
        for task in self.background:
            task.cancel()
        self.background.clear()
        if self.pool is not None:
            await self.pool.aclose()
            self.pool = None
