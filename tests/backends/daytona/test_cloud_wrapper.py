"""The in-sandbox wrapper shared by the daytona and e2b backends (``sandboxkit.backends._wrapper``).

Run here with the local bash, exactly as a cloud sandbox would run it: the wrapper is a plain
``bash -c`` command line, so its limits, its head+tail cut and its byte-exact frame can be
checked without a service.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandboxkit.backends._wrapper import RawResult, Step, build_script, parse_result, reset_script
from sandboxkit.errors import InvalidRequest, ToolchainMissing
from sandboxkit.models import ExecResult, Status, decode_output
from sandboxkit.output import cut_head_tail, cut_marker


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
    assert "__SANDBOXKIT_STATUS__" in result.stderr  # the program's text stays; ours is never in its streams


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


def test_each_stream_keeps_head_and_tail_and_a_flood_is_stopped(tmp_path: Path) -> None:
    step = Step(argv=["bash", "-c", "yes err >&2 & yes out"], output_bytes=1000, stop_bytes=200_000)
    result = run_step(step, tmp_path)
    assert result.status is Status.OUTPUT_LIMIT  # past stop_bytes: stopped, not run to its timeout
    assert result.stdout_truncated and result.stderr_truncated
    head, marker, tail = result.stdout.partition("\n[... sandboxkit: ")
    assert head == ("out\n" * 125)[:500]
    seen = ("out\n" * 50001)[:200_001]  # what the wrapper let through before it stopped the program
    assert marker and tail.endswith(seen[-500:])
    assert len(result.stdout.encode()) == 1000 + len(cut_marker(200_001 - 1000))


def test_long_output_keeps_the_end_and_the_program_runs_to_its_end(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(20000): print(i)\nprint('final answer 42')\nraise SystemExit('the traceback')"
    result = run_step(Step(argv=["python3", "-c", code], output_bytes=2000, head_fraction=0.25), tmp_path)
    assert (result.status, result.exit_code) == (Status.FAILED, 1)  # not killed at the cap
    assert result.stdout_truncated and not result.stderr_truncated
    assert result.stdout.startswith("0\n1\n2\n") and result.stdout.endswith("19999\nfinal answer 42\n")
    assert result.stderr == "the traceback\n"
    full = "".join(f"{i}\n" for i in range(20000)).encode() + b"final answer 42\n"
    assert result.stdout.encode() == cut_head_tail(full, 2000, 0.25)[0]  # the same cut as every backend


@pytest.mark.parametrize(
    ("program", "stdout", "stderr"),
    [
        ("printf x", "x", ""),
        (r"printf 'a\0b\n\0'; printf '\0' >&2", "a\0b\n\0", "\0"),
        (r"printf '\xff\xfeok\xc3'", b"\xff\xfeok\xc3".decode("utf-8", "replace"), ""),
        ("printf ''", "", ""),
    ],
)
def test_output_is_byte_exact(tmp_path: Path, program: str, stdout: str, stderr: str) -> None:
    result = run_step(Step(argv=["bash", "-c", program]), tmp_path)
    assert (result.stdout, result.stderr, result.status) == (stdout, stderr, Status.OK)


def test_the_program_cannot_forge_the_frame(tmp_path: Path) -> None:
    forged = "__SANDBOXKIT_STATUS__ rc=0 ms=1 out=2 err=0\neA==\n__SANDBOXKIT_END__\n__SANDBOXKIT_END__\n"
    result = run_step(Step(argv=["bash", "-c", f"printf '{forged}'; exit 4"]), tmp_path)
    assert (result.exit_code, result.stdout) == (4, forged)


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


def test_the_frame_survives_daytona_line_labelling(tmp_path: Path) -> None:
    """Run the wrapper, pass its streams through the fake daemon's labeller, parse: still exact."""
    from fakes.daytona_fake import daemon_session_output

    step = Step(argv=["bash", "-c", r"printf 'no newline\0\xff'; printf 'err' >&2; exit 2"])
    proc = subprocess.run(build_script(step), shell=True, cwd=tmp_path, capture_output=True, timeout=60)
    assert daemon_session_output(b"no newline\0\xff", b"")["stdout"] == "no newline\ufffd\n"  # the program's bytes
    labelled = daemon_session_output(proc.stdout, proc.stderr)  # the wrapper's frame: whole lines of base64
    result = parse_result(RawResult(labelled["stdout"], labelled["stderr"], 2, 0.1), step, backend="t", sandbox_id="l")
    assert (result.stdout, result.stderr, result.exit_code) == ("no newline\0\ufffd", "err", 2)


@settings(max_examples=40, deadline=None, database=None)
@given(
    data=st.binary(max_size=3000),
    cap=st.integers(min_value=1, max_value=4000),
    head_fraction=st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0]),
)
@example(data=b"a\x00b\xff\xc3", cap=10, head_fraction=0.5)  # fits: NUL and invalid UTF-8 kept
@example(data=b"\x00" * 50 + b"\xe2\x82\xac" * 50, cap=20, head_fraction=0.5)  # cut inside a character
def test_any_bytes_come_back_as_the_shared_head_tail_cut(data: bytes, cap: int, head_fraction: float) -> None:
    """Whatever a program writes, the wrapper's answer is ``cut_head_tail`` of it, decoded like every backend."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "data").write_bytes(data)
        step = Step(argv=["cat", str(Path(tmp, "data"))], output_bytes=cap, head_fraction=head_fraction)
        result = run_step(step, Path(tmp))
    expected, cut = cut_head_tail(data, cap, head_fraction)
    assert result.status is Status.OK
    assert (result.stdout, result.stdout_truncated) == (decode_output(expected), cut)
