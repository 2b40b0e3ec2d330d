"""``Limits.cpus`` on the subprocess backend: a CPU quota on the sandbox's cgroup (issue 27 item 14).

Without it a sandbox full of busy processes takes every core, and a correct program in the
sandbox next to it runs out of wall time: a 0 for a correct program. The quota is the cgroup's
(``cpu.max`` on v2, ``cpu.cfs_quota_us`` on v1), so it holds the program, its children and the
fork server together, whatever they do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.backends.subprocess._cgroup import CPU_PERIOD_US, SandboxCgroup, cpu_quota_us
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
#: line once they all exist. They wait for the last fork before spinning: spinning children
#: would starve the parent of its half a core while it still forks.
HUNDRED_BUSY = """
import os
start, go = os.pipe()
for _ in range(100):
    if os.fork() == 0:
        os.setsid()
        os.close(go)
        os.read(start, 1)
        while True:
            pass
os.close(go)
print("spinning", flush=True)
os.wait()
"""


@needs_cpu_cgroup
async def test_a_busy_neighbour_does_not_time_out_a_correct_program(backend: RecordingBackend) -> None:
    """Sandbox A spins 100 processes; a correct program in sandbox B still finishes in time.

    B's timeout is ten times what the same program takes alone (so the test means the same on
    a fast host and in an emulated VM). Without a quota on A, B's one process competes with A's
    100 for the cores (about 1/50 of them on two cores): fifty times slower, and it times out.
    """
    work = "total = 0\nfor i in range(3_000_000):\n    total += i\nprint(total)"
    spinning = asyncio.Event()
    neighbour = await backend.open(Limits(timeout_s=600.0, cpus=0.5, pids=256))
    correct = await backend.open(Limits(timeout_s=600.0, cpus=1.0))
    try:
        alone = await correct.run(RunRequest(code=work, language="python", limits=correct.limits))
        assert alone.status is Status.OK, alone

        def seen(chunk: bytes) -> None:
            if b"spinning" in chunk:
                spinning.set()

        load = asyncio.ensure_future(neighbour.exec(["python3", "-c", HUNDRED_BUSY], on_stdout=seen))
        await asyncio.wait_for(spinning.wait(), 120)
        assert not load.done()
        limits = correct.limits.merged(timeout_s=10 * alone.duration_s + 1.0)
        result = await correct.run(RunRequest(code=work, language="python", limits=limits))
        print(
            f"next to 100 busy processes at cpus=0.5: {result.status.value} in {result.duration_s:.2f} s "
            f"(alone: {alone.duration_s:.2f} s, timeout {limits.timeout_s:.2f} s)"
        )
        assert result.status is Status.OK, result
        assert result.stdout == f"{sum(range(3_000_000))}\n"
        load.cancel()
        with pytest.raises(asyncio.CancelledError):
            await load
    finally:
        await neighbour.close()
        await correct.close()


@needs_cpu_cgroup
def test_a_quota_above_the_parents_is_no_error() -> None:
    """Asking more cores than the parent cgroup has (a container with --cpus=0.5) is no error.

    cgroup v1 refuses a child quota above its parent's (EINVAL); the sandbox then has no quota of
    its own and the parent's, the smaller one, holds it. v2 takes any quota (the parent's still holds).
    """
    support = ISO.cgroup
    assert support.cpu_parent is not None
    parent = os.path.join(support.cpu_parent, f"sandboxkit-test-{os.getpid()}")
    os.mkdir(parent)
    try:
        v2 = os.path.exists(os.path.join(parent, "cpu.max"))
        if v2:
            with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                f.write("+cpu")
            with open(os.path.join(parent, "cpu.max"), "w") as f:
                f.write(f"{cpu_quota_us(0.5)} {CPU_PERIOD_US}")
        else:
            with open(os.path.join(parent, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(cpu_quota_us(0.5)))
        group = SandboxCgroup(dataclasses.replace(support, cpu_parent=parent), "quota-test")
        try:
            group.set_cpus(2.0)
            assert group.cpu_dir is not None
            name = "cpu.max" if v2 else "cpu.cfs_quota_us"
            with open(os.path.join(group.cpu_dir, name)) as f:
                assert f.read().split()[0] == ("200000" if v2 else "-1")
        finally:
            group.remove()
    finally:
        os.rmdir(parent)
