"""Inside scripts/cgroup2-vm.sh's guest, in a cgroup namespace of its own (as in a container).

Prints where sandboxkit put the sandbox cgroups and what a sandbox program sees as its cgroup,
each line starting with ``SUMMARY:`` for the host script to collect.
"""

from __future__ import annotations

import asyncio

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.models import Limits, RunRequest


async def main() -> None:
    backend = SubprocessBackend()
    support = backend.isolation.cgroup
    print(f"SUMMARY: container: cgroup limits {sorted(support.parents())}, {support.how}")
    for gap in support.missing:
        print(f"SUMMARY: container: missing {gap}")
    sandbox = await backend.open(Limits(cpus=0.5, memory_mb=128, pids=16))
    try:
        code = "print(open('/proc/self/cgroup').read().strip())"
        result = await sandbox.run(RunRequest(code=code, language="python", limits=sandbox.limits))
        print(f"SUMMARY: container: a sandbox ran: {result.status.value}, its cgroup {result.stdout.strip()!r}")
        cg = sandbox.cgroup
        if cg is not None and cg.cpu_dir is not None:
            with open(f"{cg.cpu_dir}/cpu.max") as f:
                print(f"SUMMARY: container: the sandbox's cpu.max is {f.read().strip()!r}")
    finally:
        await sandbox.close()
        await backend.aclose()


asyncio.run(main())
