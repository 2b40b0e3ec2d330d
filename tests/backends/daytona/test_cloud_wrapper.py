"""The in-sandbox wrapper shared by the daytona and e2b backends (``sandboxkit.backends._cloud``).

Run here with the local bash, exactly as a cloud sandbox would run it: the wrapper is a plain
``bash -c`` command line, so its limits and its status line can be checked without a service.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sandboxkit.backends._cloud import RawResult, Step, build_script, parse_result, reset_script
from sandboxkit.errors import InvalidRequest, ToolchainMissing
from sandboxkit.models import ExecResult, Status


def run_step(step: Step, cwd: Path) -> ExecResult:
    started = time.monotonic()
    proc = subprocess.run(build_script(step), shell=True, cwd=cwd, capture_output=True, text=True, timeout=60)
    raw = RawResult(proc.stdout, proc.stderr, proc.returncode, time.monotonic() - started)
    return parse_result(raw, step, backend="test", sandbox_id="local")


def test_streams_exit_code_and_exact_stderr(tmp_path: Path) -> None:
    result = run_step(Step(argv=["bash", "-c", "printf out; printf 'no newline' >&2; exit 5"]), tmp_path)
    assert (result.status, result.exit_code, result.signal) == (Status.FAILED, 5, None)
    assert result.stdout == "out"
    assert result.stderr == "no newline"  # the wrapper's status line is stripped, nothing else


def test_a_forged_status_line_is_ignored(tmp_path: Path) -> None:
    forged = "import sys; sys.stderr.write('\\n__SANDBOXKIT_STATUS__ rc=0 ms=1\\n'); sys.exit(2)"
    result = run_step(Step(argv=["python3", "-c", forged]), tmp_path)
    assert result.exit_code == 2 and result.status is Status.FAILED
    assert "__SANDBOXKIT_STATUS__" in result.stderr  # the program's text stays; ours is the last line


def test_killed_by_a_signal_reports_the_signal_without_shell_noise(tmp_path: Path) -> None:
    result = run_step(Step(argv=["python3", "-c", "import os; os.kill(os.getpid(), 9)"]), tmp_path)
    assert (result.exit_code, result.signal, result.stderr) == (None, 9, "")


def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    step = Step(argv=["bash", "-c", "(sleep 30; touch late) & sleep 30"], timeout_s=1)
    result = run_step(step, tmp_path)
    assert result.status is Status.TIMEOUT
    time.sleep(0.2)
    assert not (tmp_path / "sandboxkit-ws" / "late").exists()
    assert list((tmp_path / "sandboxkit-ctl").glob("*.pid")) == []


def test_each_stream_is_capped(tmp_path: Path) -> None:
    result = run_step(Step(argv=["bash", "-c", "yes err >&2 & yes out"], output_bytes=1000), tmp_path)
    assert result.status is Status.OUTPUT_LIMIT
    assert len(result.stdout) <= 1000 and result.stdout_truncated


def test_arguments_are_never_parsed_by_a_shell(tmp_path: Path) -> None:
    result = run_step(Step(argv=["echo", "$(touch pwned)", "; rm -rf x", "'q'"]), tmp_path)
    assert result.stdout == "$(touch pwned) ; rm -rf x 'q'\n"
    assert not list(tmp_path.rglob("pwned"))


def test_env_names_are_checked(tmp_path: Path) -> None:
    assert run_step(Step(argv=["printenv", "GREETING"], env={"GREETING": "a b;c"}), tmp_path).stdout == "a b;c\n"
    with pytest.raises(InvalidRequest):
        build_script(Step(argv=["true"], env={"BAD NAME": "x"}))


def test_missing_toolchain_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(ToolchainMissing, match="no-such-compiler"):
        run_step(Step(argv=["true"], binaries=["no-such-compiler"]), tmp_path)


def test_file_size_and_memory_limits(tmp_path: Path) -> None:
    big_file = run_step(
        Step(argv=["head", "-c", "3000000", "/dev/zero"], file_size_mb=1, output_bytes=4 << 20), tmp_path
    )
    assert big_file.status is Status.OK  # stdout is a pipe, not a file: not limited
    writer = "open('f', 'wb').write(b'x' * 3_000_000)"
    assert run_step(Step(argv=["python3", "-c", writer], file_size_mb=1), tmp_path).status is not Status.OK
    hog = run_step(Step(argv=["python3", "-c", "x = bytearray(2 << 30)"], memory_mb=256), tmp_path)
    assert hog.status is Status.MEMORY_EXCEEDED


def test_reset_script_empties_the_workspace(tmp_path: Path) -> None:
    run_step(Step(argv=["touch", "left.txt"]), tmp_path)
    assert (tmp_path / "sandboxkit-ws" / "left.txt").exists()
    subprocess.run(reset_script(), shell=True, cwd=tmp_path, check=True)
    assert list((tmp_path / "sandboxkit-ws").iterdir()) == []


def test_stdin_file_in_a_fresh_sandbox(tmp_path: Path) -> None:
    # The stdin file is uploaded (creating the control directory) before the workspace exists.
    (tmp_path / "sandboxkit-ctl").mkdir()
    (tmp_path / "sandboxkit-ctl" / "in").write_text("piped\n")
    result = run_step(Step(argv=["cat"], stdin_file="sandboxkit-ctl/in"), tmp_path)
    assert (result.status, result.stdout) == (Status.OK, "piped\n")
