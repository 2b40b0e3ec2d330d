"""``sandboxkit grade``: the README's main job, bad input files, and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandboxkit.cli import app
from sandboxkit.registry import BackendSpec, available_backends
from support.judge import ROOT, BrokenBackend, needs_gpp, needs_java, needs_node, needs_subprocess

pytestmark = needs_subprocess
EXAMPLES = ROOT / "examples" / "problems.jsonl"
CLI = str(Path(sys.executable).parent / "sandboxkit")


def sandboxkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=280)


def results(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@needs_gpp
@needs_java
@needs_node
def test_examples_are_graded_as_expected(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    out = tmp_path / "results.jsonl"
    done = sandboxkit("grade", str(EXAMPLES), "-j", "4", "-o", str(out), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "programs/s" in done.stdout and "latency p50 / p99" in done.stdout
    got = {r["id"]: r for r in results(out)}
    assert list(got) == [r["id"] for r in rows]  # one result per row, in input order
    mismatches = []
    for row in rows:
        result, expect = got[row["id"]], row["expect"]
        if result["status"] != expect["status"] or result["passed"] != expect.get("passed", result["passed"]):
            mismatches.append((row["id"], expect, result["status"], result["passed"], result["error"]))
    assert not mismatches
    for result in got.values():
        assert {"id", "passed", "pass_rate", "reward", "status", "cases", "timing"} <= set(result)
    # Where the time went: compiled languages spent time compiling, every graded row spent time running.
    assert "per language" in done.stdout and all(lang in done.stdout for lang in ("python", "cpp", "bash"))
    ran = [r for r in got.values() if r["timing"]]
    assert ran and all(r["timing"]["run_s"] > 0 for r in ran)  # type: ignore[index]
    assert all(r["timing"]["compile_s"] > 0 for r in ran if r["language"] == "cpp")  # type: ignore[index]
    assert all(r["timing"]["compile_s"] == 0 for r in ran if r["language"] == "python")  # type: ignore[index]


def test_examples_cover_the_languages_and_failure_kinds() -> None:
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    problems: dict[str, set[str]] = {}
    for row in rows:
        problem, kind = row["id"].rsplit("/", 1)
        problems.setdefault(problem, set()).add(kind)
    assert len(problems) >= 40
    assert {p.split("/")[0] for p in problems} == {"python", "cpp", "javascript", "bash", "java"}
    assert all("correct" in kinds and len(kinds) >= 2 for kinds in problems.values())
    statuses = {row["expect"]["status"] for row in rows}
    assert {"ok", "failed", "timeout", "compile_error", "banned"} <= statuses


def test_bad_rows_get_an_error_and_the_rest_is_graded(tmp_path: Path) -> None:
    good = {
        "id": "good",
        "completion": "```python\nprint(int(input()) * 2)\n```",
        "tests": [{"stdin": "4", "expected_stdout": "8"}],
    }
    lines = [
        json.dumps(good),
        '{"id": "broken", "completion": ',
        json.dumps({"id": "unknown-type", "completion": "print(1)", "tests": [{"type": "quiz"}]}),
        json.dumps({"id": "no-tests", "completion": "print(1)"}),
        "",
        json.dumps([1, 2]),
        json.dumps({**good, "id": "good-2"}),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    done = sandboxkit("grade", str(source), "-o", "out.jsonl", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = results(tmp_path / "out.jsonl")
    assert [r["id"] for r in got] == ["good", "line-2", "unknown-type", "no-tests", "line-6", "good-2"]
    assert [r["status"] for r in got] == ["ok", "invalid", "invalid", "invalid", "invalid", "ok"]
    assert "line 2 is not valid JSON" in str(got[1]["error"])
    assert "unknown test type 'quiz'" in str(got[2]["error"])
    assert "row has no tests field" in str(got[3]["error"])
    assert all(r["reward"] is None for r in got[1:5])


def test_results_to_stdout_and_shaping_option(tmp_path: Path) -> None:
    row = {"id": "slow", "completion": "```python\nwhile True: pass\n```", "tests": [{"stdin": ""}], "timeout_s": 1}
    (tmp_path / "in.jsonl").write_text(json.dumps(row) + "\n")
    done = sandboxkit("grade", "in.jsonl", "-o", "-", "-q", "--shaping", "all_or_nothing,timeout=-1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (result,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (result["status"], result["reward"]) == ("timeout", -1.0)
    assert "programs/s" in done.stderr  # the summary moves to stderr when results go to stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "cannot read"),
        (["in.jsonl", "--shaping", "best_of_n"], "unknown shaping mode"),
        (["in.jsonl", "--backend", "nope"], "no backend named 'nope'"),
        (["in.jsonl", "--language", "cobol"], "unknown language"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": 1, "completion": "print(1)", "tests": [{"stdin": ""}]}) + "\n")
    done = sandboxkit("grade", *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_infrastructure_failure_exits_3_with_every_row_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(available_backends(), "broken", BackendSpec("broken", factory=BrokenBackend))
    monkeypatch.chdir(tmp_path)
    rows = [{"id": i, "completion": "print(1)", "tests": [{"stdin": "", "expected_stdout": "1"}]} for i in range(3)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = CliRunner().invoke(app, ["grade", "in.jsonl", "--backend", "broken", "-q"])
    assert done.exit_code == 3, done.output
    got = results(tmp_path / "results.jsonl")
    assert [(r["id"], r["status"], r["reward"], r["infra_error"]) for r in got] == [
        (str(i), "infra_error", None, True) for i in range(3)
    ]
