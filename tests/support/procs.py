"""Reading ``/proc`` for the tests' leak checks: one parser of ``/proc/PID/stat``."""

from __future__ import annotations

import os
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
