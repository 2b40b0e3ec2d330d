"""The cluster-wide limiter on a real local Ray cluster: caps, throughput, dead workers, the bucket.

Eight async worker actors each own a ``SandboxPool(limiter="ray")``, like verl's reward
workers; the backend's sandboxes only sleep and report to a recorder actor, so the
recorder sees every run in flight across the cluster.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from sandboxkit import SandboxPool, SyncSandboxPool
from sandboxkit.distributed import NAMESPACE, RayLimiter, limiter_name, shutdown_limiter
from support.distributed import TEST_NAMESPACE, PoolWorker, Recorder, SleepBackend

pytestmark = pytest.mark.slow

WORKERS = 8
CAP = 16


@pytest.fixture(scope="module")
def workers(ray_cluster: Any) -> list[Any]:
    """Eight pool-owning worker actors, reused by the tests (each test rebuilds their pools)."""
    actor = ray_cluster.remote(PoolWorker).options(num_cpus=0)
    handles = [actor.remote() for _ in range(WORKERS)]
    yield handles
    ray_cluster.get([w.stop.remote() for w in handles])


def new_recorder(ray: Any, name: str) -> Any:
    return ray.remote(Recorder).options(name=name, namespace=TEST_NAMESPACE, num_cpus=0).remote()


def limiter_stats(ray: Any, backend_name: str) -> dict[str, Any]:
    """The limiter actor's statistics (it is created by the first pool call that needs it)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            actor = ray.get_actor(limiter_name(backend_name), namespace=NAMESPACE)
            break
        except ValueError:
            assert time.monotonic() < deadline, f"no limiter actor for {backend_name!r}"
            time.sleep(0.05)
    stats: dict[str, Any] = ray.get(actor.statistics.remote())
    return stats


def setup_all(ray: Any, handles: list[Any], backend: dict[str, Any], pool: dict[str, Any], **kw: Any) -> None:
    kinds = ray.get([w.setup.remote(backend, pool, **kw) for w in handles])
    assert set(kinds) == {"RayLimiter" if pool.get("limiter") == "ray" or kw else "LocalLimiter"}, kinds


def test_eight_workers_sharing_a_cap_of_16_never_have_more_than_16_runs_in_flight(
    ray_cluster: Any, workers: list[Any]
) -> None:
    ray = ray_cluster
    recorder = new_recorder(ray, "rec-cap")
    setup_all(ray, workers, {"name": "cap16", "recorder": "rec-cap"}, {"max_concurrency": CAP, "limiter": "ray"})
    out = ray.get([w.run_many.remote(30, "sleep:0.05") for w in workers])
    assert [o["errors"] for o in out] == [[]] * WORKERS
    assert sum(o["ok"] for o in out) == WORKERS * 30
    seen = ray.get(recorder.snapshot.remote())
    assert seen["runs"] == WORKERS * 30
    # 8 per-process caps of 16 would allow 128; the cluster cap allows 16, and is actually used.
    assert seen["peak"] <= CAP
    assert seen["peak"] >= CAP // 2, f"the cap was not used: peak {seen['peak']}"
    ray.get([w.stop.remote() for w in workers])
    stats = limiter_stats(ray, "cap16")
    assert stats["calls_in_flight"] == 0 and stats["sandboxes_open"] == 0 and stats["owners"] == {}


def _throughput(ray: Any, handles: list[Any], per_worker: int) -> float:
    start_at = time.time() + 0.3  # line the workers up: measure the limiter, not this driver's dispatch
    out = ray.get([w.run_many.remote(per_worker, "sleep:0.05", start_at) for w in handles])
    assert all(o["ok"] == per_worker for o in out), [o["errors"][:1] for o in out]
    wall = max(o["finished"] for o in out) - min(o["started"] for o in out)
    return per_worker * len(handles) / wall


def test_aggregate_throughput_is_at_least_90_percent_of_one_process_with_the_same_cap(
    ray_cluster: Any, workers: list[Any]
) -> None:
    ray = ray_cluster
    per_worker = 40  # 320 runs of 50 ms under a cap of 16: 1 s if the cap is kept busy
    # The call cap is what is compared. The sandbox cap is set out of the way: each worker keeps
    # its warm sandboxes (moving sandbox slots between workers is measured in bench_ray).
    caps = {"max_concurrency": CAP, "max_sandboxes": WORKERS * CAP}
    single = workers[:1]
    setup_all(ray, single, {"name": "tp-local"}, {**caps, "limiter": "local"})
    local = max(_throughput(ray, single, per_worker * WORKERS) for _ in range(3))
    ray.get(single[0].stop.remote())
    setup_all(ray, workers, {"name": "tp-ray"}, {**caps, "limiter": "ray"})
    cluster = max(_throughput(ray, workers, per_worker) for _ in range(3))
    ray.get([w.stop.remote() for w in workers])
    ideal = CAP / 0.05
    print(f"\nthroughput: one process {local:.0f}/s, 8 workers {cluster:.0f}/s, ideal {ideal:.0f}/s")
    assert cluster >= 0.9 * local, f"8 workers reached {cluster:.0f}/s, one process {local:.0f}/s"
    assert cluster <= ideal * 1.02  # more would mean the cap was exceeded


def test_a_worker_killed_mid_lease_gives_its_leases_back_within_the_ttl(ray_cluster: Any) -> None:
    ray = ray_cluster
    ttl = 4.0
    actor = ray.remote(PoolWorker).options(num_cpus=0)
    victim, survivor = actor.remote(), actor.remote()
    pool = {"max_concurrency": 4, "limiter": "ray"}
    setup = {"limiter_options": {"lease_ttl_s": ttl}}
    ray.get([w.setup.remote({"name": "kill"}, pool, **setup) for w in (victim, survivor)])
    ray.get(victim.run_in_background.remote(4, "sleep:600"))
    deadline = time.monotonic() + 30
    while limiter_stats(ray, "kill")["calls_in_flight"] < 4:
        assert time.monotonic() < deadline, "the victim never took the 4 slots"
        time.sleep(0.05)
    ray.kill(victim)
    killed = time.monotonic()
    while True:
        stats = limiter_stats(ray, "kill")
        if stats["calls_in_flight"] == 0 and stats["sandboxes_open"] == 0:
            break
        assert time.monotonic() - killed <= ttl, f"leases still held {ttl}s after the kill: {stats}"
        time.sleep(0.05)
    returned_after = time.monotonic() - killed
    print(f"\nleases of the killed worker returned after {returned_after:.2f}s (ttl {ttl}s)")
    assert stats["reaped_dead"] + stats["reaped_expired"] == 1
    out = ray.get(survivor.run_many.remote(8, "sleep:0.01"), timeout=30)  # the full cap is usable again
    assert out["ok"] == 8
    ray.get(survivor.stop.remote())


def test_the_creation_bucket_holds_across_workers(ray_cluster: Any, workers: list[Any]) -> None:
    ray = ray_cluster
    recorder = new_recorder(ray, "rec-bucket")
    rate, burst, per_worker = 20.0, 2, 4
    chosen = workers[:4]
    pool = {"max_concurrency": 32, "creation_rate": rate, "creation_burst": burst, "warm": per_worker}
    setup_all(ray, chosen, {"name": "bucket", "recorder": "rec-bucket"}, {**pool, "limiter": "ray"})
    opens = ray.get(recorder.snapshot.remote())["opens"]
    ray.get([w.stop.remote() for w in chosen])
    assert len(opens) == per_worker * len(chosen)
    # In any window, at most burst + rate * window creations. The times are taken when each open is
    # recorded, a moment after its token was granted; at load 15+ that moment varied by 30 ms (a fresh
    # machine saw 0.17 s where 0.18 s was the bound), so 50 ms of slack: one token's worth, while the
    # long windows (16 opens need >= 0.65 s; with no bucket they take ~0) keep the check's teeth.
    slack = 0.05
    for i in range(len(opens)):
        for j in range(i + burst, len(opens)):
            allowed_gap = (j - i - (burst - 1)) / rate
            assert opens[j] - opens[i] >= allowed_gap - slack, (i, j, opens[j] - opens[i], allowed_gap)


def test_driver_task_and_threaded_actor_share_one_cap(ray_cluster: Any) -> None:
    ray = ray_cluster
    recorder = new_recorder(ray, "rec-mixed")
    backend = {"name": "mixed", "recorder": "rec-mixed"}

    def run_sync_pool(n: int) -> int:
        with SyncSandboxPool(SleepBackend(**backend), max_concurrency=2, limiter="ray") as pool:
            results = pool.run_many([{"code": "sleep:0.05"}] * n)
        return sum(1 for r in results if getattr(r, "exit_code", None) == 0)

    @ray.remote(num_cpus=0)
    def task(n: int) -> int:
        return run_sync_pool(n)

    class Threaded:  # a threaded actor: several calls at once on plain threads, each using its own pool
        def run(self, n: int) -> int:
            return run_sync_pool(n)

    threaded = ray.remote(Threaded).options(num_cpus=0, max_concurrency=2).remote()

    async def driver(n: int) -> int:
        async with SandboxPool(SleepBackend(**backend), max_concurrency=2, limiter="ray") as pool:
            results = await pool.run_many([{"code": "sleep:0.05"}] * n)
        return sum(1 for r in results if getattr(r, "exit_code", None) == 0)

    refs = [task.remote(10), threaded.run.remote(10), threaded.run.remote(10)]
    assert asyncio.run(driver(10)) == 10
    assert ray.get(refs) == [10, 10, 10]
    seen = ray.get(recorder.snapshot.remote())
    assert seen["runs"] == 40
    assert seen["peak"] <= 2


async def test_a_cancelled_wait_leaks_no_slot_and_grants_follow_request_order(ray_cluster: Any) -> None:
    ray = ray_cluster
    name = "sandboxkit-limiter-fifo"
    holder, a, b = (RayLimiter(1, name=name, linger_s=0) for _ in range(3))
    try:
        await holder.acquire_call("h")
        order: list[str] = []

        async def wait(limiter: RayLimiter, label: str) -> None:
            await limiter.acquire_call(label)
            order.append(label)

        first = asyncio.create_task(wait(a, "a"))
        await asyncio.sleep(0.2)
        doomed = asyncio.create_task(wait(b, "doomed"))
        await asyncio.sleep(0.2)
        second = asyncio.create_task(wait(b, "b"))
        await asyncio.sleep(0.2)
        doomed.cancel()
        await asyncio.sleep(0.2)
        holder.release_call("h")
        await asyncio.wait_for(first, 10)
        a.release_call("a")
        await asyncio.wait_for(second, 10)
        assert order == ["a", "b"]
        b.release_call("b")
        await asyncio.sleep(0.3)
        stats = await holder.cluster_statistics()
        assert stats["calls_in_flight"] == 0 and stats["calls_waiting"] == 0
    finally:
        for limiter in (holder, a, b):
            await limiter.aclose()
    assert shutdown_limiter(name)
    assert not shutdown_limiter(name)
    assert ray.is_initialized()


async def test_released_slots_are_reused_without_round_trips_while_nobody_else_waits(ray_cluster: Any) -> None:
    limiter = RayLimiter(4, name="sandboxkit-limiter-cache", linger_s=1.0)
    try:
        for i in range(50):
            await limiter.acquire_call(i)
            limiter.release_call(i)
        stats = await limiter.cluster_statistics()
        assert stats["granted_total"] == 1  # one grant from the actor, 49 cache hits
        other = RayLimiter(4, name="sandboxkit-limiter-cache", linger_s=1.0)
        try:
            for i in range(4):
                await asyncio.wait_for(other.acquire_call(i), 5)  # the cached slot is not withheld
        finally:
            await other.aclose()
    finally:
        await limiter.aclose()


def test_a_pool_refused_a_sandbox_gets_one_when_another_worker_closes_an_idle_one(
    ray_cluster: Any, workers: list[Any]
) -> None:
    ray = ray_cluster
    a, b = workers[:2]
    pool = {"max_concurrency": 4, "max_sandboxes": 2, "limiter": "ray"}
    setup_all(ray, [a, b], {"name": "reclaim"}, pool)
    assert ray.get(a.run_many.remote(4, "sleep:0.05"))["ok"] == 4  # a keeps 2 idle sandboxes warm
    assert limiter_stats(ray, "reclaim")["sandboxes_open"] == 2
    out = ray.get(b.run_many.remote(4, "sleep:0.01"), timeout=30)
    assert out["ok"] == 4, out["errors"]
    assert limiter_stats(ray, "reclaim")["sandboxes_open"] <= 2
    ray.get([a.stop.remote(), b.stop.remote()])


def test_threads_of_one_process_use_one_limiter_safely(ray_cluster: Any) -> None:
    backend = SleepBackend(name="threads")
    with SyncSandboxPool(backend, max_concurrency=3, limiter="ray") as pool:
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(5):
                    pool.run("sleep:0.01")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert pool.metrics()["max_concurrency"] == 3


async def test_a_recreated_limiter_actor_relearns_what_every_process_holds(ray_cluster: Any) -> None:
    ray = ray_cluster
    name = "sandboxkit-limiter-restart"
    holder, other = RayLimiter(2, name=name, lease_ttl_s=3), RayLimiter(2, name=name, lease_ttl_s=3)
    try:
        await holder.acquire_call("h1")
        await holder.acquire_call("h2")
        actor = ray.get_actor(name, namespace=NAMESPACE)
        ray.kill(actor)  # as if its node had been lost: the next call creates a new, empty one
        for _ in range(200):
            try:
                stats = await holder.cluster_statistics()
                if stats["calls_in_flight"] == 2:
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
        assert stats["calls_in_flight"] == 2 and list(stats["owners"]) == [holder.owner]
        waiting = asyncio.create_task(other.acquire_call("o"))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # the re-declared leases still count against the cap
        holder.release_call("h1")
        await asyncio.wait_for(waiting, 10)
    finally:
        await holder.aclose()
        await other.aclose()
        shutdown_limiter(name)


async def test_a_pool_asking_for_other_limits_gets_the_limits_in_force_and_a_warning(
    ray_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    name = "sandboxkit-limiter-mismatch"
    first, second = RayLimiter(3, name=name), RayLimiter(50, name=name)
    try:
        await first.acquire_call("a")
        with caplog.at_level("WARNING", logger="sandboxkit.distributed"):
            await second.acquire_call("b")
        assert second.statistics().max_calls == 3
        assert any("already running" in r.getMessage() for r in caplog.records)
    finally:
        await first.aclose()
        await second.aclose()
    fresh = RayLimiter(50, name=name)  # nobody holds anything now: the new limits apply
    try:
        await fresh.acquire_call("c")
        assert fresh.statistics().max_calls == 50
    finally:
        await fresh.aclose()
        shutdown_limiter(name)


async def test_an_unused_limiter_actor_exits_by_itself(ray_cluster: Any) -> None:
    ray = ray_cluster
    name = "sandboxkit-limiter-idle"
    limiter = RayLimiter(2, name=name, idle_exit_s=1.0)
    await limiter.acquire_call("a")
    limiter.release_call("a")
    await limiter.aclose()  # leaves: the actor has no owner left
    for _ in range(100):
        try:
            ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            break
        await asyncio.sleep(0.1)
    else:
        stats = ray.get(ray.get_actor(name, namespace=NAMESPACE).statistics.remote())
        pytest.fail(f"the idle limiter actor is still alive after 10 s: {stats}")


async def test_a_per_worker_cap_holds_inside_the_cluster_cap(ray_cluster: Any) -> None:
    name = "sandboxkit-limiter-worker-cap"
    limiter = RayLimiter(8, name=name, worker_max_calls=2)
    try:
        await limiter.acquire_call("a")
        await limiter.acquire_call("b")
        third = asyncio.create_task(limiter.acquire_call("c"))
        await asyncio.sleep(0.3)
        assert not third.done()  # the cluster has 6 free slots; this worker's own cap is full
        third.cancel()
        with pytest.raises(asyncio.CancelledError):
            await third
        limiter.release_call("a")
        await asyncio.wait_for(limiter.acquire_call("d"), 5)
        assert limiter.statistics().calls_in_flight == 2
    finally:
        await limiter.aclose()
        shutdown_limiter(name)


async def test_learned_concurrency_and_a_429_penalty_work_under_the_ray_limiter(ray_cluster: Any) -> None:
    # The learned cap lives in the pool (per process), so it works with any Limiter; the 429 penalty
    # goes through Limiter.penalize_creation to the actor's bucket, which every process shares.
    from sandboxkit import RateLimited, RunResult
    from sandboxkit.testing import FakeBackend

    name = "sandboxkit-limiter-learned"
    backend = FakeBackend(capacity=2, open_delay_s=0.002)
    limiter = RayLimiter(16, 16, creation_rate=1000, creation_burst=1000, name=name)
    try:
        async with SandboxPool(backend, max_concurrency=16, limiter=limiter, backoff_base_s=0.001) as pool:
            results = await asyncio.wait_for(pool.run_many([{"code": f"sleep:0.00{i % 5}"} for i in range(32)]), 60)
            assert all(isinstance(r, RunResult) for r in results), results
            assert not any(isinstance(r, RateLimited) for r in results)
            assert backend.peak_live <= 2 and 2 <= pool.metrics()["learned_cap"] <= 3
            assert pool.metrics()["retries"] == 0
            limiter.penalize_creation(0.5)  # as after a 429 on creation: every creation waits
            await asyncio.sleep(0.2)  # fire and forget: let the message reach the actor
            delay = await ray_cluster.get_actor(name, namespace=NAMESPACE).creation_delay.remote(limiter.owner)
            assert delay > 0.1, "the cluster's creation bucket was not drained"
    finally:
        shutdown_limiter(name)
