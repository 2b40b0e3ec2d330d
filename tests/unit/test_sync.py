"""The blocking twin: same surface as the async pool, usable where a loop is already running."""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandboxkit import InvalidRequest, RunResult, SandboxPool, Session, Status, SyncSandboxPool, SyncSession
from sandboxkit.testing import FakeBackend


def _public(cls: type) -> set[str]:
    # dir(), not vars(): SandboxPool and Session inherit ``run`` from one shared definition.
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


def test_twins_have_the_same_methods() -> None:
    assert _public(SandboxPool) - {"aclose", "start"} == _public(SyncSandboxPool) - {"close", "submit"}
    assert _public(Session) == _public(SyncSession)


def _parameters(fn: object) -> list[tuple[str, object, object]]:
    # Name, kind and default of every parameter: a twin that drops a default or turns a keyword
    # into **kwargs (losing it from help() and from type checkers) fails here.
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("async_cls", "sync_cls", "names"),
    [
        (SandboxPool, SyncSandboxPool, ("__init__", "run", "exec", "run_many", "session", "fork", "metrics")),
        (
            Session,
            SyncSession,
            ("open", "run", "exec", "write_files", "read_files", "checkpoint", "close", "suspend", "resume"),
        ),
    ],
)
def test_twins_take_the_same_arguments(async_cls: type, sync_cls: type, names: tuple[str, ...]) -> None:
    for name in names:
        a = _parameters(getattr(async_cls, name))
        s = _parameters(getattr(sync_cls, name))
        assert a == s, f"{sync_cls.__name__}.{name} differs from {async_cls.__name__}.{name}"


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
    before = set(threading.enumerate())
    pool = SyncSandboxPool(FakeBackend())
    thread = pool._thread.thread
    assert set(threading.enumerate()) - before == {thread}, "the pool runs exactly one thread of its own"
    pool.close()
    pool.close()
    assert not thread.is_alive()
    assert thread not in threading.enumerate()
    assert pool._thread.loop.is_closed()
