"""The blocking twin: same surface as the async pool, usable where a loop is already running."""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandboxkit import InvalidRequest, RunResult, SandboxPool, Session, Status, SyncSandboxPool, SyncSession
from support.fake_backend import FakeBackend


def _public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}


def test_twins_have_the_same_methods() -> None:
    assert _public(SandboxPool) - {"aclose", "start"} == _public(SyncSandboxPool) - {"close", "submit"}
    assert _public(Session) == _public(SyncSession)


def test_twins_take_the_same_arguments() -> None:
    for name in ("run", "exec", "run_many", "session"):
        a = list(inspect.signature(getattr(SandboxPool, name)).parameters)
        s = list(inspect.signature(getattr(SyncSandboxPool, name)).parameters)
        assert a == s, name


def test_plain_script_use() -> None:
    backend = FakeBackend()
    with SyncSandboxPool(backend, max_concurrency=2) as pool:
        assert pool.run("ok").status is Status.OK
        results = pool.run_many([{"code": "ok"}, {"code": "fail"}])
        assert [r.status for r in results if isinstance(r, RunResult)] == [Status.OK, Status.FAILED]
        with pytest.raises(InvalidRequest):
            pool.run("x", language="cobol")
        with pool.session() as s:
            s.write_files({"f": "1"})
            assert s.read_files(["f"]) == {"f": b"1"}
    assert not backend.live
    assert pool.closed


def test_works_inside_a_running_event_loop() -> None:
    # Jupyter, TRL's reward thread and Ray async actors call from a thread whose loop is running.
    backend = FakeBackend()
    pool = SyncSandboxPool(backend)

    async def caller() -> tuple[Status, Status]:
        blocking = pool.run("ok").status
        bridged = await asyncio.wrap_future(pool.submit(lambda p: p.run("sleep:0.01")))
        return blocking, bridged.status

    try:
        assert asyncio.run(caller()) == (Status.OK, Status.OK)
    finally:
        pool.close()
    assert not backend.live


def test_many_threads_share_one_pool() -> None:
    backend = FakeBackend()
    with SyncSandboxPool(backend, max_concurrency=4) as pool, ThreadPoolExecutor(32) as ex:
        statuses = list(ex.map(lambda _: pool.run("sleep:0.005").status, range(200)))
    assert statuses == [Status.OK] * 200
    assert backend.peak_in_flight <= 4
    assert not backend.live


def test_close_is_idempotent_and_stops_the_thread() -> None:
    pool = SyncSandboxPool(FakeBackend())
    thread = pool._thread.thread
    pool.close()
    pool.close()
    assert not thread.is_alive()
    assert threading.active_count() >= 1
