"""``Limits.cpus`` on the subprocess backend: a CPU quota on the sandbox's cgroup (issue 27 item 14).

Without it a sandbox full of busy processes takes every core, and a correct program in the
sandbox next to it runs out of wall time: a 0 for a correct program. The quota is the cgroup's
(``cpu.max`` on v2, ``cpu.cfs_quota_us`` on v1), so it holds the program, its children and the
fork server together, whatever they do.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._isolation import probe
from sandboxkit.models import Limits, RunRequest, Status
from support.marks import requires
from support.subprocess_sandboxes import FAST, RecordingBackend

ISO = probe()
needs_cpu_cgroup = requires(ISO.cgroup.cpu_parent is not None, "needs a writable cpu cgroup (v2 cpu.max or v1 cfs)")

#: Four busy children for a fixed wall time, then their CPU time from getrusage(RUSAGE_CHILDREN).
#: Each child starts its own session: where the kernel groups scheduling by session (autogroup),
#: that is how a program claims more than one group's share of the cores.
BUSY_FOUR = """
import json, os, resource, time
wall = 1.5
start = time.monotonic()
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        while time.monotonic() - start < wall:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
elapsed = time.monotonic() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu_s": used.ru_utime + used.ru_stime, "wall_s": elapsed}))
"""


def _quota(sandbox: SubprocessSandbox) -> str:
    """What the kernel holds as the sandbox's CPU quota, in the file's own words."""
    cg = sandbox.cgroup
    assert cg is not None and cg.cpu_dir is not None
    name = "cpu.max" if os.path.exists(os.path.join(cg.cpu_dir, "cpu.max")) else "cpu.cfs_quota_us"
    with open(os.path.join(cg.cpu_dir, name)) as f:
        return f.read().split()[0]


@needs_cpu_cgroup
async def test_the_cpus_limit_is_the_sandboxs_cgroup_quota(backend: RecordingBackend) -> None:
    sandbox = await backend.open(FAST.merged(cpus=0.5))
    try:
        assert (await sandbox.exec("true")).exit_code == 0
        assert _quota(sandbox) == "50000"  # half of a 100 ms period
        request = RunRequest(code="pass", language="python", limits=FAST.model_copy(update={"cpus": None}))
        assert (await sandbox.run(request)).status is Status.OK
        assert _quota(sandbox) in ("max", "-1")  # cpus=None: no quota, the backend's default
        request = RunRequest(code="pass", language="python", limits=FAST.merged(cpus=2.25))
        assert (await sandbox.run(request)).status is Status.OK
        assert _quota(sandbox) == "225000"  # more than one core: the quota spans periods of every core
    finally:
        await sandbox.close()


@needs_cpu_cgroup
async def test_half_a_cpu_is_measured_as_at_most_about_half_a_core(backend: RecordingBackend) -> None:
    """Four busy processes would use every core; at cpus=0.5 their CPU time is half the wall time.

    Only the upper bound is asserted: a loaded machine can give less, never more than the quota
    (plus one period's slack).
    """
    sandbox = await backend.open(FAST.merged(cpus=0.5, timeout_s=20.0))
    try:
        result = await sandbox.run(RunRequest(code=BUSY_FOUR, language="python", limits=sandbox.limits))
        assert result.status is Status.OK, result
        used = json.loads(result.stdout)
        share = used["cpu_s"] / used["wall_s"]
        print(f"cpus=0.5: {used['cpu_s']:.2f} s CPU in {used['wall_s']:.2f} s wall = {share:.2f} cores")
        assert share <= 0.5 + 0.1 / used["wall_s"] + 0.05, used
    finally:
        await sandbox.close()


#: A hundred processes, each in its own session (see BUSY_FOUR), that spin until killed, and a
#: line once they all exist.
HUNDRED_BUSY = """
import os
for _ in range(100):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
print("spinning", flush=True)
os.wait()
"""


@needs_cpu_cgroup
async def test_a_busy_neighbour_does_not_time_out_a_correct_program(backend: RecordingBackend) -> None:
    """Sandbox A spins 100 processes; a correct program in sandbox B still finishes well in time.

    B needs about 0.5 s of CPU. Without a quota on A, B's one process competes with A's 100 for
    the cores (about 1/50 of them on two cores: 25 s of wall time), and its 6 s timeout expires.
    """
    spinning = asyncio.Event()
    neighbour = await backend.open(Limits(timeout_s=60.0, cpus=0.5, pids=256))
    correct = await backend.open(Limits(timeout_s=6.0, cpus=1.0))
    try:
        assert (await correct.exec("true")).exit_code == 0  # its fork server is up before the load starts

        def seen(chunk: bytes) -> None:
            if b"spinning" in chunk:
                spinning.set()

        load = asyncio.ensure_future(neighbour.exec(["python3", "-c", HUNDRED_BUSY], on_stdout=seen))
        await asyncio.wait_for(spinning.wait(), 30)
        assert not load.done()
        work = "total = 0\nfor i in range(6_000_000):\n    total += i\nprint(total)"
        result = await correct.run(RunRequest(code=work, language="python", limits=correct.limits))
        print(f"next to 100 busy processes at cpus=0.5: {result.status.value} in {result.duration_s:.2f} s")
        assert result.status is Status.OK, result
        assert result.stdout == f"{sum(range(6_000_000))}\n"
        load.cancel()
        with pytest.raises(asyncio.CancelledError):
            await load
    finally:
        await neighbour.close()
        await correct.close()
