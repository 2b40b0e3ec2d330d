"""Spillover: one pool over the local subprocess backend (capped) and a quota-limited Daytona fake.

A batch bigger than the local cap must spill to Daytona, Daytona's quota refusals must send the
rest back to waiting (never lose a row), and every row must get the verdict it gets local-only.
``SANDBOXKIT_SPILL_N=512`` gives the figure of issue 29.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console

import sandboxkit
from fakes.daytona_fake import FakeDaytona
from sandboxkit import SandboxPool
from sandboxkit.backends.daytona import DaytonaBackend
from sandboxkit.cli.grade import _summary
from sandboxkit.judge import Verdict, grade_many
from sandboxkit.spillover import SpilloverBackend, Tier
from support.judge import needs_subprocess

pytestmark = needs_subprocess

N = int(os.environ.get("SANDBOXKIT_SPILL_N", "48"))
CASES = [{"stdin": f"{i} {i + 1}\n", "expected_stdout": f"{2 * i + 1}\n"} for i in range(3)]
READ = "a, b = map(int, input().split())\n"
KINDS = {"correct": READ + "print(a + b)\n", "wrong": READ + "print(a - b)\n", "crash": READ + "print([][a])\n"}
ROWS = [{"completion": f"```python\n{KINDS[k]}```", "tests": CASES} for k in (list(KINDS) * N)[:N]]


def _key(verdicts: list[Verdict]) -> list[tuple[Any, ...]]:
    return [(v.status, v.passed, v.reward, tuple(c.status for c in v.cases)) for v in verdicts]


async def _grade(backend: Any) -> list[Verdict]:
    async with SandboxPool(backend, max_concurrency=24, deadline_s=600) as pool:
        return await grade_many(pool, ROWS, shaping="pass_rate", timeout_s=10)


async def test_spillover_batch_loses_nothing_and_matches_local_only(
    fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]
) -> None:
    fake.quota = 4  # vCPUs, one per sandbox: Daytona refuses the 5th with "Total CPU limit exceeded"
    local_only = await _grade(sandboxkit.backend("subprocess"))
    spill = SpilloverBackend([Tier(sandboxkit.backend("subprocess"), cap=8), Tier(make_backend())])
    spilled = await _grade(spill)
    assert [v.status for v in spilled].count("infra_error") == 0
    assert _key(spilled) == _key(local_only)
    ran_on = Counter(v.backend for v in spilled)
    assert set(ran_on) == {"subprocess", "daytona"}, ran_on
    assert sum(ran_on.values()) == N
    assert fake.ledger.peak_live <= 4
    assert fake.ledger.rejected.get(403, 0) >= 1  # Daytona did refuse: the quota was learned, not given
    console = Console(record=True, width=120)
    console.print(_summary([v.model_dump() for v in spilled], 1.0, spill.name, {}))
    text = console.export_text()
    assert "ran on daytona" in text
    assert "ran on subprocess" in text
    assert spill.counts()["subprocess"] >= 1 and spill.counts()["daytona"] >= 1


async def test_sessions_stay_on_the_backend_they_opened_on(
    fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]
) -> None:
    """Local holds one sandbox: the second session spills to Daytona and both stay where they opened."""
    spill = SpilloverBackend([Tier(sandboxkit.backend("subprocess"), cap=1), Tier(make_backend())])
    code = (
        "import os\nn = int(open('n').read()) if os.path.exists('n') else 0\nopen('n', 'w').write(str(n + 1))\nprint(n)"
    )
    async with SandboxPool(spill, max_concurrency=4) as pool, pool.session() as first, pool.session() as second:
        seen: dict[str, list[tuple[str, str]]] = {"first": [], "second": []}
        for _ in range(3):
            for name, session in (("first", first), ("second", second)):
                result = await session.run(code, language="python")
                seen[name].append((result.backend, result.stdout))
    assert seen == {
        "first": [("subprocess", "0\n"), ("subprocess", "1\n"), ("subprocess", "2\n")],
        "second": [("daytona", "0\n"), ("daytona", "1\n"), ("daytona", "2\n")],
    }


async def test_a_spilled_session_names_suspends_and_expires_as_its_tier(
    fake: FakeDaytona, make_backend: Callable[..., DaytonaBackend]
) -> None:
    """``backend_name`` is the tier's, suspend reaches the tier's sandbox, and the tier gets the pool's TTL."""
    daytona = make_backend()
    spill = SpilloverBackend([Tier(sandboxkit.backend("subprocess"), cap=1), Tier(daytona)])
    async with SandboxPool(spill, max_concurrency=4, deadline_s=120) as pool:
        assert daytona.owner_ttl_s == 120 and daytona.lifetime_minutes == 2  # not the default limits' 40 s
        async with pool.session() as first, pool.session() as second:
            await first.exec("true")
            await second.write_files({"kept.txt": "on daytona"})
            assert (first.backend_name, second.backend_name) == ("subprocess", "daytona")
            assert await second.suspend() is True
            assert fake.box(str(second.sandbox_id)).data["state"] == "stopped"
            assert (await second.exec("cat kept.txt")).stdout == "on daytona"
