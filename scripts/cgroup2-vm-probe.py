"""Inside scripts/cgroup2-vm.sh's guest: where sandboxkit put the sandbox cgroups, and one sandbox run.

Run in the guest's other layouts (a container's cgroup namespace, a systemd service); each line
starts with ``SUMMARY: <label>:`` (the first argument) for the host script to collect.
"""

from __future__ import annotations

import asyncio
import sys

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.models import Limits, RunRequest


async def main(label: str) -> None:
    backend = SubprocessBackend()
    support = backend.isolation.cgroup
    print(f"SUMMARY: {label}: cgroup limits {sorted(support.parents())}, {support.how}")
    for gap in support.missing:
        print(f"SUMMARY: {label}: missing {gap}")
    sandbox = await backend.open(Limits(cpus=0.5, memory_mb=128, pids=16))
    try:
        code = "print(open('/proc/self/cgroup').read().strip())"
        result = await sandbox.run(RunRequest(code=code, language="python", limits=sandbox.limits))
        print(f"SUMMARY: {label}: a sandbox ran: {result.status.value}, its cgroup {result.stdout.strip()!r}")
        cg = sandbox.cgroup
        if cg is not None and cg.cpu_dir is not None:
            with open(f"{cg.cpu_dir}/cpu.max") as f:
                print(f"SUMMARY: {label}: the sandbox's cpu.max is {f.read().strip()!r}")
    finally:
        await sandbox.close()
        await backend.aclose()


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "probe"))
