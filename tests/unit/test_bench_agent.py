"""``sandboxkit bench agent``: its plumbing, run tiny on the subprocess backend.

The benchmark's figures are only worth reading if each row carries them and if its verification
can say no: a rollout whose turn went wrong must not count as verified.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.integrations import docker_engine_up
from support.marks import missing

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = {
    "SANDBOXKIT_BENCH_AGENT_TURNS": "2",
    "SANDBOXKIT_BENCH_AGENT_GROUP": "2",
    "SANDBOXKIT_BENCH_AGENT_THINK_S": "0.05",
    "SANDBOXKIT_BENCH_AGENT_SETUP_HASHES": "2000",
    "SANDBOXKIT_BENCH_AGENT_FLEET": "3",
    "SANDBOXKIT_BENCH_AGENT_WINDOW_S": "0.2",
    "SANDBOXKIT_BENCH_AGENT_BACKENDS": "subprocess",
}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="suspend needs the cgroup freezer (root)")


def _bench_agent() -> ModuleType:
    """benchmarks/bench_agent.py, loaded the way ``sandboxkit bench`` loads it (it is not a package of the install)."""
    spec = importlib.util.spec_from_file_location("bench_agent_under_test", BENCHMARKS / "bench_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_agent_reports_every_variant_and_the_suspended_fleet(tmp_path: Path) -> None:
    out = tmp_path / "agent.json"
    done = subprocess.run(
        [sys.executable, "-m", "sandboxkit.cli", "bench", "agent", "--json", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, **TINY},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    cases = [r["case"] for r in rows]
    assert cases == [
        "subprocess: fork + suspend",
        "subprocess: fork + idle suspend",
        "subprocess: fork, no suspend",
        "subprocess: no fork + suspend",
        "subprocess: no fork, no suspend",
        "subprocess: 3 sessions running (control), CPU over 0.2 s",
        "subprocess: 3 sessions suspended, CPU over 0.2 s",
        "subprocess: resume of 3 suspended sessions",
    ]
    for row in rows[:5]:
        extra = row["extra"]
        assert row["n"] == 2 and row["met"] is True, extra["details"]
        assert extra["verified"] == extra["rollouts"] == 2
        assert extra["sandbox_cpu_s_per_traj"] > 0 and extra["host_cpu_s_per_traj"] > 0
        assert extra["memory_mib_per_traj"] > 0
        assert (row["baseline"] is None) == (row["case"] == "subprocess: no fork, no suspend")
    by_case = dict(zip(cases, rows, strict=True))
    # Explicit suspends all stopped the sandbox; with no suspend, none did.
    assert by_case["subprocess: fork + suspend"]["extra"]["suspended_turns"] == 4
    assert "sandbox CPU" in by_case["subprocess: fork + suspend"]["extra"]["details"]
    assert by_case["subprocess: fork, no suspend"]["extra"]["suspended_turns"] == 0
    frozen = by_case["subprocess: 3 sessions suspended, CPU over 0.2 s"]
    assert frozen["extra"]["suspended_ok"] == 3 and frozen["extra"]["ticks_total"] == 0 and frozen["met"] is True
    resumed = by_case["subprocess: resume of 3 suspended sessions"]["extra"]
    assert resumed["state_kept"] == 3
    assert resumed["first_cell_after_resume_p50_ms"] > 0 and resumed["same_cell_running_p50_ms"] > 0


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "prepared each"])
async def test_a_broken_turn_fails_the_rollouts_verification(fork: bool) -> None:
    bench = _bench_agent()
    variant = bench.Variant(fork=fork, suspend="explicit")
    shape = bench.Shape(turns=2, group=2, think_s=0.01, setup_hashes=2000)

    sound = await bench.run_group("subprocess", shape, variant)
    broken = await bench.run_group("subprocess", dataclasses.replace(shape, broken_turn=2), variant)

    assert sound.verified == 2 and bench.group_row("subprocess", shape, variant, sound).met is True
    assert broken.verified == 0
    assert bench.group_row("subprocess", shape, variant, broken).met is False


def test_the_table_shows_a_rows_details_column_only_where_a_row_has_them() -> None:
    from rich.console import Console

    from sandboxkit.benchmarking import Row, render

    plain = Row("agent", "baseline", 1, 1.0, 1.0)
    detailed = Row("agent", "fork", 1, 1.0, 1.0, extra={"details": "sandbox CPU 0.5 s/traj, [backend=docker] refused"})
    console = Console(width=300, record=True)
    console.print(render([plain, detailed]))
    text = console.export_text()
    assert "details" in text and "sandbox CPU 0.5 s/traj, [backend=docker] refused" in text
    console = Console(width=300, record=True)
    console.print(render([plain]))
    assert "details" not in console.export_text()


async def test_on_docker_the_containers_cgroups_give_cpu_memory_and_the_suspended_fleets_zero() -> None:
    if not docker_engine_up():
        missing("no Docker engine answers")
    bench = _bench_agent()
    variant = bench.Variant(fork=True, suspend="explicit")
    # No busy watcher: a busy container's ``docker pause`` can fail under load (docs/benchmarks.md), not this test's subject.
    shape = bench.Shape(turns=1, group=2, think_s=0.01, setup_hashes=2000, idle_load=0.0)

    row = bench.group_row("docker", shape, variant, await bench.run_group("docker", shape, variant))
    assert row.met is True, row.extra["details"]
    assert row.extra["cpu_source"] == "the sandboxes' cgroups"
    assert row.extra["sandbox_cpu_s_per_traj"] > 0 and row.extra["memory_mib_per_traj"] > 0

    rows = await bench.fleet_rows("docker", 2, 0.2, resume_target_ms=300)
    assert [r.case for r in rows] == [
        "docker: 2 sessions running (control), CPU over 0.2 s",
        "docker: 2 sessions suspended, CPU over 0.2 s",
        "docker: resume of 2 suspended sessions",
    ]
    assert rows[1].extra["ticks_total"] == 0 and rows[1].extra["suspended_ok"] == 2
    assert rows[2].extra["state_kept"] == 2
