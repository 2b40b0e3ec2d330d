"""``SandboxPool(..., processes=N)``: pooled runs served by host worker processes behind one limiter.

What must not change when the host's work spreads over worker processes: results in input
order with none lost, the pool's caps on calls and sandboxes (one count across processes), the
deadline and its error type, a program's failure as a result, a dead worker's calls retried
(never a 0), and nothing left on the machine (process, cgroup, mount, workspace) once a worker
is gone or the pool is closed.
"""

from __future__ import annotations

import os
import signal
import types
from collections.abc import AsyncIterator

import anyio
import pytest

from sandboxkit import DeadlineExceeded, InvalidRequest, PoolClosed, SandboxPool, Status, Transient
from sandboxkit.backends.subprocess._cgroup import PREFIX
from sandboxkit.backends.subprocess._isolation import probe
from sandboxkit.limiter import LocalLimiter
from sandboxkit.models import Limits
from support.subprocess_sandboxes import FAST

HOSTILE = Limits(timeout_s=2.0, memory_mb=256, pids=64, output_bytes=64 * 1024, file_size_mb=16)


class RecordingLimiter(LocalLimiter):
    """The pool's real limiter, remembering the most calls and sandboxes it ever let through at once."""

    def __init__(self, calls: int, sandboxes: int) -> None:
        super().__init__(calls, sandboxes)
        self.calls_now = self.most_calls = 0
        self.sandboxes_now = self.most_sandboxes = 0

    async def acquire_call(self, token: object) -> None:
        await super().acquire_call(token)
        self.calls_now += 1
        self.most_calls = max(self.most_calls, self.calls_now)

    def release_call(self, token: object) -> None:
        super().release_call(token)
        self.calls_now -= 1

    async def try_acquire_sandbox(self, token: object) -> bool:
        ok = await super().try_acquire_sandbox(token)
        if ok:
            self.sandboxes_now += 1
            self.most_sandboxes = max(self.most_sandboxes, self.sandboxes_now)
        return ok

    def release_sandbox(self, token: object) -> None:
        super().release_sandbox(token)
        self.sandboxes_now -= 1


def worker_pids(pool: SandboxPool) -> list[int]:
    assert pool._workers is not None
    return [link.pid for link in pool._workers.links if link.pid is not None]


def left_behind(pids: list[int], root: str) -> list[str]:
    """What the sandboxes of these (gone) worker processes left: the processes, cgroups, mounts, workspaces."""
    tags = [f"-p{pid}" for pid in pids]
    found = [f"worker {pid} still running" for pid in pids if _running(pid)]
    for parent in set(probe().cgroup.parents().values()):
        found += [f"cgroup {e}" for e in os.listdir(parent) if e.startswith(PREFIX) and any(t in e for t in tags)]
    with open("/proc/self/mountinfo") as f:
        found += [f"mount {line.split()[4]}" for line in f if any(t in line.split()[4] for t in tags)]
    if os.path.isdir(root):
        found += [f"workspace {e}" for e in os.listdir(root) if any(e.endswith(t) for t in tags)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                groups = f.read()
        except OSError:
            continue
        if any(t + "\n" in groups or t + "/" in groups for t in tags):
            found.append(f"process {pid} in a sandbox cgroup")
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with SandboxPool("subprocess", max_concurrency=4, limits=FAST, processes=2) as p:
        yield p


async def test_results_come_back_in_input_order_and_none_is_lost(pool: SandboxPool) -> None:
    results = await pool.run_many([{"code": f"print({i})"} for i in range(120)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(120)]  # type: ignore[union-attr]
    metrics = pool.metrics()
    assert metrics["calls"] == 120 and metrics["statuses"] == {"ok": 120}
    assert metrics["processes"] == 2 and metrics["workers_alive"] == 2
    assert metrics["sandboxes_created"] >= 1  # the workers' sandboxes are counted in the pool's metrics


async def test_both_workers_serve_and_a_program_failure_is_a_result(pool: SandboxPool) -> None:
    assert pool._workers is not None
    results = await pool.run_many(
        [{"code": "import time; time.sleep(0.2); print(1)"}] * 4 + [{"code": "raise SystemExit(3)"}]
    )
    failed = results[-1]
    assert not isinstance(failed, Exception) and failed.status is Status.FAILED and failed.exit_code == 3
    executed = await pool.exec("echo hi")
    assert executed.stdout == "hi\n"
    # Arguments of any mapping or sequence type travel (an unpicklable view is copied first).
    executed = await pool.exec(("bash", "-c", "echo $X"), env=types.MappingProxyType({"X": "from env"}))
    assert executed.stdout == "from env\n"
    with pytest.raises(InvalidRequest, match="'nowhere' is not a directory"):  # the cwd travels to the worker
        await pool.exec("pwd", cwd="nowhere")
    assert pool.metrics()["sandboxes_open"] >= 2  # four sleepers at once did not fit in one worker's one sandbox


async def test_the_caps_are_one_count_across_processes() -> None:
    limiter = RecordingLimiter(3, 2)
    async with SandboxPool(
        "subprocess", max_concurrency=3, max_sandboxes=2, limits=FAST, processes=2, limiter=limiter
    ) as pool:
        async with pool.session() as session:  # the parent's own sandbox counts against the same cap
            await session.run("open('kept', 'w').write('x')")
            results = await pool.run_many([{"code": "import time; time.sleep(0.05); print(1)"}] * 24)
            assert (await session.run("print(open('kept').read())")).stdout == "x\n"
        assert all(not isinstance(r, Exception) and r.stdout == "1\n" for r in results), results
    assert limiter.most_calls <= 3 and limiter.most_sandboxes <= 2, (limiter.most_calls, limiter.most_sandboxes)
    assert limiter.calls_now == 0 and limiter.sandboxes_now == 0


async def test_a_session_waits_for_the_sandbox_a_worker_keeps_after_its_run() -> None:
    # One sandbox for the whole pool: a worker's run holds it when the session (in the parent) asks,
    # and keeps it idle after. Was: nobody told the worker to let it go, and the session waited forever.
    async with SandboxPool("subprocess", max_concurrency=2, max_sandboxes=1, limits=FAST, processes=2) as pool:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run, "import time; time.sleep(1)")
            await anyio.sleep(0.3)
            with anyio.fail_after(30):
                async with pool.session() as session:
                    assert (await session.run("print('mine')")).stdout == "mine\n"
        assert (await pool.run("print('and back')")).stdout == "and back\n"


async def test_a_worker_gets_the_sandbox_a_closed_session_left_warm_in_the_parent() -> None:
    # The other way round: the session's sandbox goes back warm to the parent's idle list, which frees
    # no slot. Was: the worker refused a slot while the session ran waited forever.
    async with SandboxPool("subprocess", max_concurrency=2, max_sandboxes=1, limits=FAST, processes=2) as pool:
        async with pool.session() as session:
            await session.run("pass")
            async with anyio.create_task_group() as tg:
                results: list[str] = []

                async def pooled() -> None:
                    results.append((await pool.run("print('pooled')")).stdout)

                tg.start_soon(pooled)
                await anyio.sleep(0.5)  # the worker has asked for the one slot and been refused
                await session.close()
                with anyio.fail_after(30):
                    while not results:
                        await anyio.sleep(0.05)
        assert results == ["pooled\n"]


async def test_closing_the_pool_under_a_call_raises_pool_closed_as_in_one_process() -> None:
    pool = SandboxPool("subprocess", max_concurrency=2, limits=FAST, processes=2)
    await pool.start()
    async with anyio.create_task_group() as tg:

        async def close_soon() -> None:
            await anyio.sleep(1.0)
            await pool.aclose()

        tg.start_soon(close_soon)
        with pytest.raises(PoolClosed):
            await pool.run("import time; time.sleep(30)")


async def test_the_deadline_is_the_pools_and_the_sandbox_is_not_reused(pool: SandboxPool) -> None:
    with pytest.raises(DeadlineExceeded):
        await pool.run("import time; time.sleep(30)", deadline_s=0.5)
    again = await pool.run("print('next')")
    assert again.status is Status.OK and again.stdout == "next\n"
    assert pool.metrics()["errors"] == {"deadline_exceeded": 1}


async def test_a_bad_request_is_the_same_error_before_any_worker_sees_it(pool: SandboxPool) -> None:
    with pytest.raises(InvalidRequest):
        await pool.run("print(1)", language="no-such-language")
    with pytest.raises(InvalidRequest):
        await pool.run("print(1)", timeout=-1)


async def test_a_killed_worker_is_retried_replaced_and_leaves_nothing() -> None:
    async with SandboxPool("subprocess", max_concurrency=2, limits=FAST, processes=2, backoff_base_s=0.01) as pool:
        await pool.run_many([{"code": "pass"}] * 2)
        root = pool.backend.root  # type: ignore[attr-defined]

        async def kill_one_once_busy() -> int:
            assert pool._workers is not None
            while True:
                for link in pool._workers.links:
                    if link.calls and link.sandboxes and link.pid is not None:
                        os.kill(link.pid, signal.SIGKILL)
                        return link.pid
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            killed: list[int] = []

            async def killer() -> None:
                killed.append(await kill_one_once_busy())

            tg.start_soon(killer)
            result = await pool.run("import time; time.sleep(1); print('done')")
        assert result.status is Status.OK and result.stdout == "done\n"  # retried, never scored as a failure
        metrics = pool.metrics()
        assert metrics["retries"] >= 1 and metrics["errors"] == {}
        with anyio.fail_after(60):
            while pool.metrics()["workers_alive"] < 2:
                await anyio.sleep(0.05)
        assert pool.metrics()["workers_replaced"] == 1
        assert left_behind(killed, root) == []
        assert (await pool.run("print(2)")).stdout == "2\n"


async def test_without_retries_a_dead_worker_is_an_infrastructure_error() -> None:
    async with SandboxPool("subprocess", max_concurrency=1, limits=FAST, processes=2, retries=0) as pool:
        await pool.run("pass")
        assert pool._workers is not None

        async def kill_when_busy() -> None:
            assert pool._workers is not None
            while True:
                for link in pool._workers.links:
                    if link.calls and link.sandboxes and link.pid is not None:
                        os.kill(link.pid, signal.SIGKILL)
                        return
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_when_busy)
            with pytest.raises(Transient) as caught:
                await pool.run("import time; time.sleep(2)")
        assert caught.value.kind == "worker_lost"


async def test_closing_the_pool_ends_the_workers_and_leaves_nothing() -> None:
    pool = SandboxPool("subprocess", max_concurrency=4, limits=FAST, processes=2, warm=2)
    await pool.start()
    pids = worker_pids(pool)
    root = pool.backend.root  # type: ignore[attr-defined]
    await pool.run_many([{"code": "import time; time.sleep(0.1)"}] * 4)
    assert left_behind(pids, root) != []  # the check sees live sandboxes (it can fail)
    await pool.aclose()
    assert left_behind(pids, root) == []


async def test_a_cancelled_call_ends_its_run_in_the_worker(pool: SandboxPool) -> None:
    with anyio.move_on_after(0.5):
        await pool.run("import time; time.sleep(30)")
    with anyio.fail_after(30):  # the worker discards the sandbox it was running in
        while (
            pool.metrics()["sandboxes_open"] > 0 and pool.metrics()["sandboxes_idle"] < pool.metrics()["sandboxes_open"]
        ):
            await anyio.sleep(0.05)
    assert (await pool.run("print(3)")).stdout == "3\n"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("while True: pass", Status.TIMEOUT),
        ("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", Status.TIMEOUT),
        ("blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))", Status.MEMORY_EXCEEDED),
        ("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(chunk)", Status.OUTPUT_LIMIT),
    ],
    ids=["loop", "fork-bomb", "memory-bomb", "stdout-flood"],
)
async def test_hostile_programs_are_contained_through_workers(code: str, status: Status) -> None:
    async with SandboxPool("subprocess", max_concurrency=2, limits=HOSTILE, processes=2) as pool:
        pids = worker_pids(pool)
        root = pool.backend.root  # type: ignore[attr-defined]
        result = await pool.run(code)
        assert result.status is status, result
        after = await pool.run("print('still serving')")
        assert after.stdout == "still serving\n"
    assert left_behind(pids, root) == []


def _fds_and_rss(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return len(os.listdir(f"/proc/{pid}/fd")), rss_kb * 1024


@pytest.mark.slow
async def test_soak_ten_thousand_runs_none_lost_and_fds_and_memory_flat() -> None:
    total, rounds = 10_000, 10
    async with SandboxPool("subprocess", max_concurrency=8, warm=8, limits=FAST, processes=2) as pool:
        await pool.run_many([{"code": "print(1)"}] * 500)  # warm: fork servers, code paths, metric windows
        pids = [os.getpid(), *worker_pids(pool)]
        before = {pid: _fds_and_rss(pid) for pid in pids}
        lost = 0
        for _ in range(rounds):
            results = await pool.run_many([{"code": "print(1)"}] * (total // rounds))
            lost += sum(1 for r in results if isinstance(r, Exception) or r.stdout != "1\n")
        after = {pid: _fds_and_rss(pid) for pid in pids}
        assert worker_pids(pool) == pids[1:]  # no worker died or was replaced on the way
    assert lost == 0
    for pid in pids:
        (fds0, rss0), (fds1, rss1) = before[pid], after[pid]
        assert fds1 <= fds0, f"pid {pid}: {fds0} -> {fds1} descriptors"
        assert rss1 - rss0 < 24 << 20, f"pid {pid}: RSS grew {(rss1 - rss0) >> 20} MiB over {total} runs"


PARENT = """
import asyncio, sys
from sandboxkit import SandboxPool
from sandboxkit.models import Limits

async def main():
    pool = SandboxPool("subprocess", max_concurrency=2, limits=Limits(timeout_s=60), processes=2)
    await pool.start()
    print(*[link.pid for link in pool._workers.links], pool.backend.root, flush=True)
    await pool.run_many([{"code": "import time; time.sleep(60)"}] * 2)

asyncio.run(main())
"""


async def test_workers_of_a_killed_parent_close_their_sandboxes_and_exit() -> None:
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        *pids, root = (await anyio.to_thread.run_sync(parent.stdout.readline)).split()
        workers = [int(p) for p in pids]
        with anyio.fail_after(30):  # both long runs have started in their sandboxes
            while len(left_behind(workers, root)) < 4:  # 2 workers + at least 2 of their sandbox entries
                await anyio.sleep(0.1)
    finally:
        parent.kill()
        parent.wait()
    with anyio.fail_after(60):
        while left_behind(workers, root):
            await anyio.sleep(0.2)
