"""Processes in the tests: one parser of ``/proc/PID/stat`` for leak checks, and a child signalled mid-work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple


class ProcStat(NamedTuple):
    state: str  # "R", "S", "Z"...
    ppid: int
    pgrp: int


def pids() -> list[int]:
    """Every pid ``/proc`` lists now."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def proc_stat(pid: int) -> ProcStat | None:
    """State, parent and process group of ``pid``; ``None`` once it is gone.

    Split after the last ``)``: the command name in parentheses may hold spaces and parentheses.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return ProcStat(fields[0].decode(), int(fields[1]), int(fields[2]))
    except (OSError, IndexError, ValueError):
        return None


def interrupt_when_ready(
    script: str,
    env: Mapping[str, str] | None,
    ready: Callable[[], bool],
    before_signal: Callable[[], None] | None = None,
    timeout_s: float = 60.0,
    sig: signal.Signals = signal.SIGINT,
) -> str:
    """Run ``script`` in a child Python, send it ``sig`` once ``ready()``, return its stderr (Ctrl-C tests).

    Asserts the child was still running when ready; ``before_signal`` may assert more first. The child is
    killed if it outlives the wait, so a test never leaves it behind. Its stderr goes to a file, not a pipe
    nobody reads (a teardown writing more than a pipe holds would block and look like a hang), and it runs
    under ``-X faulthandler``: a child that outlives the wait is sent SIGABRT, and its threads' stacks are
    the failure message.
    """
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-c", script], env=None if env is None else dict(env), stderr=stderr
        )

        def output() -> str:
            stderr.seek(0)
            return stderr.read().decode(errors="replace")

        try:
            deadline = time.monotonic() + timeout_s
            while not ready() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if proc.poll() is not None:
                raise AssertionError(f"the child ended before it was ready:\n{output()}")
            assert ready(), f"the child was not ready within {timeout_s} s"
            if before_signal is not None:
                before_signal()
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)
                proc.wait(timeout=10)
                stacks = output()[-8000:]
                raise AssertionError(
                    f"the child outlived {sig.name} by {timeout_s} s; its threads:\n{stacks}"
                ) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return output()
