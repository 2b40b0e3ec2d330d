"""Requests to the runner and the results it sends back, translated to and from sandboxkit's models.

No I/O here: the step dictionaries and the status rules are the part worth reading and
testing on their own, and the cold path (argv) and the Python fast path share them.
"""

from __future__ import annotations

import math
import posixpath
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from sandboxkit.languages import Language
from sandboxkit.models import ExecResult, Limits, Status, decode_output

__all__ = ["base_env", "classify", "make_step", "split_outputs"]

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Open files a program may hold at once (contains fd bombs; plenty for judge tasks).
NOFILE = 256
#: The compiler may open more (headers, temporary files).
COMPILE_NOFILE = 4096

# What runtimes print when an allocation fails; checked only on a non-zero exit and in the
# tail of stderr, so a program that merely prints the words while succeeding is never misread.
_OOM_PATTERNS = re.compile(
    rb"MemoryError|std::bad_alloc|java\.lang\.OutOfMemoryError|JavaScript heap out of memory"
    rb"|runtime: out of memory|cannot allocate memory|memory allocation of \d+ bytes failed"
)


def base_env(workdir: str, language: Language | None, extra: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a program: nothing of the host's, only what it needs and what was asked."""
    env = {"PATH": PATH, "HOME": workdir, "LANG": "C.UTF-8"}
    if language is not None:
        for key, value in language.env.items():  # toolchain caches live in the workspace
            env[key] = value if posixpath.isabs(value) else posixpath.join(workdir, value)
    env.update(extra)
    return env


def make_step(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float,
    limits: Limits,
    stdin: tuple[int, int] | None = None,
    compile_step: bool = False,
) -> dict[str, Any]:
    """One step for the runner. CPU time is capped a second above the wall timeout, so a busy
    loop dies by SIGXCPU even if the runner's own timer were late."""
    step: dict[str, Any] = {
        "argv": list(argv),
        "cwd": cwd,
        "env": dict(env),
        "timeout": timeout_s,
        "cpu": math.ceil(timeout_s) + 1,
        "cap": limits.output_bytes,
        "nofile": COMPILE_NOFILE if compile_step else NOFILE,
        "fsize": None if compile_step or limits.file_size_mb is None else limits.file_size_mb << 20,
        "gate": compile_step,
    }
    if stdin is not None and stdin[1]:
        step["stdin"] = list(stdin)
    return step


def split_outputs(steps: Sequence[Mapping[str, Any]], blob: bytes) -> list[tuple[bytes, bytes]]:
    """Cut the reply's blob area into each step's (stdout, stderr), in order."""
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    for step in steps:
        n_out, n_err = int(step.get("out_len", 0)), int(step.get("err_len", 0))
        out.append((blob[pos : pos + n_out], blob[pos + n_out : pos + n_out + n_err]))
        pos += n_out + n_err
    return out


def classify(step: Mapping[str, Any], stdout: bytes, stderr: bytes) -> ExecResult:
    """Map the runner's facts about one process to an :class:`ExecResult`."""
    exit_code = step.get("exit")
    sig = step.get("signal")
    if step.get("over"):
        status = Status.OUTPUT_LIMIT
    elif step.get("timed_out") or sig == signal.SIGXCPU:
        status = Status.TIMEOUT
    elif step.get("oom") and exit_code != 0:
        status = Status.MEMORY_EXCEEDED
    elif exit_code == 0:
        status = Status.OK
    elif _OOM_PATTERNS.search(stderr[-4096:]):
        status = Status.MEMORY_EXCEEDED
    else:
        status = Status.FAILED
    return ExecResult(
        status=status,
        exit_code=exit_code,
        signal=sig,
        stdout=decode_output(stdout),
        stderr=decode_output(stderr),
        stdout_truncated=bool(step.get("out_trunc")),
        stderr_truncated=bool(step.get("err_trunc")),
        duration_s=float(step.get("duration", 0.0)),
    )
