"""``grade_many`` over a multi-process pool grades each row in a host worker, with the same verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import InvalidRequest, SandboxPool
from sandboxkit.judge import grade_many
from support.judge import FAST, ROOT, needs_gpp, needs_subprocess

pytestmark = needs_subprocess
ROWS = [json.loads(line) for line in (ROOT / "examples" / "problems.jsonl").read_text().splitlines()]


def rows_of(language: str) -> list[dict[str, Any]]:
    return [row for row in ROWS if row["language"] == language]


async def graded_in_workers(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    async with SandboxPool("subprocess", max_concurrency=4, limits=FAST, processes=2) as pool:
        seen: list[int] = []
        verdicts = await grade_many(pool, rows, on_result=lambda i, _: seen.append(i))
        assert sorted(seen) == list(range(len(rows)))  # on_result runs here, once per row
        assert not pool._core.entries, "a row was graded in the parent, not in a worker"
        metrics = pool.metrics()
        assert metrics["sandboxes_created"] > 0 and metrics["calls"] > 0  # the workers' runs are counted
    return [(v.status, v.passed) for v in verdicts]


async def test_python_rows_get_their_verdicts_in_workers_in_input_order() -> None:
    rows = rows_of("python")
    assert await graded_in_workers(rows) == [(r["expect"]["status"], r["expect"]["passed"]) for r in rows]


@needs_gpp
async def test_compiled_rows_use_sessions_inside_the_workers() -> None:
    rows = rows_of("cpp")
    assert await graded_in_workers(rows) == [(r["expect"]["status"], r["expect"]["passed"]) for r in rows]


async def test_a_job_that_cannot_travel_is_refused_before_it_leaves() -> None:
    async with SandboxPool("subprocess", max_concurrency=2, limits=FAST, processes=2) as pool:
        assert pool._workers is not None

        async def local(pool: SandboxPool) -> None:  # a local function cannot be pickled by name
            return None

        with pytest.raises(InvalidRequest, match="cannot be sent to a host worker"):
            await pool._workers.job(local)


def test_sandboxkit_grade_with_two_host_processes(tmp_path: Path) -> None:
    rows = rows_of("python")[:12]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cli = str(Path(sys.executable).parent / "sandboxkit")
    done = subprocess.run(
        [cli, "grade", str(source), "-j", "4", "-P", "2", "-o", "out.jsonl", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"], r["passed"]) for r in got] == [
        (r["id"], r["expect"]["status"], r["expect"]["passed"]) for r in rows
    ]
    bad = subprocess.run(
        [cli, "grade", str(source), "-P", "none", "-q"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert bad.returncode != 0 and "processes must be a positive integer or 'auto'" in bad.stderr


async def test_streamed_output_is_served_in_the_parent_with_the_same_result() -> None:
    async with SandboxPool("subprocess", max_concurrency=2, limits=FAST, processes=2) as pool:
        chunks: list[bytes] = []
        result = await pool.run("print('streamed')", on_stdout=chunks.append)
        assert result.stdout == "streamed\n" and b"".join(chunks) == b"streamed\n"
