"""``sandboxkit run`` streams the program's output to the terminal as it is written.

A real CLI process is spawned and its stdout read through a pipe: the first line must be
readable while the program (and so the CLI) is still running.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

PROGRAM = "import sys, time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')\nprint('oops', file=sys.stderr)\nsys.exit(3)"


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sandboxkit.cli", "run", *args, "-c", PROGRAM, "--timeout", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # unbuffered: readline must not pull later output into a buffer communicate() skips
    )


def test_run_streams_the_first_line_before_the_program_ends() -> None:
    proc = spawn()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        first_at = time.perf_counter()
        still_running = proc.poll() is None
        second = proc.stdout.readline()
        gap = time.perf_counter() - first_at
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert (first, second) == (b"first\n", b"second\n")
    assert still_running, "the first line was only readable after the CLI exited: not streamed"
    assert gap >= 1.0, f"the lines arrived {gap:.2f}s apart; the program slept 2 s between them: not streamed"
    assert rest == b"" and err == b"oops\n", "each chunk is printed once (no replay at the end)"
    assert proc.returncode == 3, "the CLI still exits with the program's exit code"


def test_run_no_stream_prints_at_the_end() -> None:
    started = time.perf_counter()
    proc = spawn("--no-stream")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        arrived = time.perf_counter() - started
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert first == b"first\n" and rest == b"second\n" and err == b"oops\n"
    assert arrived >= 2.0, f"--no-stream printed the first line after {arrived:.2f}s, before the program's 2 s sleep"
    assert proc.returncode == 3


def test_run_json_never_streams() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sandboxkit.cli", "run", "--json", "-c", "print('only in json')"],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0
    result = json.loads(out.stdout)
    assert result["stdout"] == "only in json\n" and result["status"] == "ok"
