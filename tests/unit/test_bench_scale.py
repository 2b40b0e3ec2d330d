"""``sandboxkit bench scale``: one row per host-process count, each with its host CPU per run.

A short real run (0.3 s per cell, P = 1 and 2): the rows the lead's 16-core runs will read must
exist, count runs and carry the ``getrusage`` figure and the load average.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def _bench_scale(tmp_path: Path, **settings: str) -> list[dict[str, Any]]:
    """The rows of a short ``sandboxkit bench scale --quick`` run (c=2, 0.3 s a cell) with ``settings``."""
    out_json = tmp_path / "scale.json"
    env = {**os.environ, "SANDBOXKIT_SCALE_C": "2", "SANDBOXKIT_SCALE_SECONDS": "0.3", **settings}
    done = subprocess.run(
        [sys.executable, "-m", "sandboxkit.cli", "bench", "scale", "--quick", "--json", str(out_json)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(out_json.read_text())
    return rows


def test_bench_scale_measures_each_host_process_count(tmp_path: Path) -> None:
    rows = _bench_scale(tmp_path, SANDBOXKIT_SCALE_PARTS="print", SANDBOXKIT_SCALE_P="1,2")
    assert [r["case"] for r in rows] == ["print(1), 1 host process(es) x c=2", "print(1), 2 host process(es) x c=1"]
    for row in rows:
        assert row["n"] > 0 and row["throughput"] > 0
        assert row["extra"]["wrong"] == 0
        assert row["extra"]["host_cpu_ms_per_run"] > 0
        assert len(row["extra"]["load_avg"]) == 2 and row["extra"]["cores"] >= 1


def test_bench_scale_has_one_pool_rows_beside_the_hand_split(tmp_path: Path) -> None:
    rows = _bench_scale(tmp_path, SANDBOXKIT_SCALE_PARTS="pool", SANDBOXKIT_SCALE_POOL_P="1,2")
    assert [r["case"] for r in rows] == [
        "print(1), one pool with 1 host worker(s) x c=2",
        "print(1), one pool with 2 host worker(s) x c=2",
    ]
    for row in rows:
        assert row["n"] > 0 and row["extra"]["wrong"] == 0
        # the parent's own share is part of the host's (which adds the workers' CPU)
        assert 0 < row["extra"]["parent_cpu_ms_per_run"] <= row["extra"]["host_cpu_ms_per_run"] + 0.001
