"""Requests to the runner and the results it sends back, translated to and from sandboxkit's models.

No I/O here: the step dictionaries and the status rules are the part worth reading and
testing on their own, and the cold path (argv) and the Python fast path share them.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from sandboxkit.languages import Language
from sandboxkit.models import ExecResult, Limits, Status, decode_output
from sandboxkit.output import cut_marker
from sandboxkit.output import head_tail_split as _split

__all__ = ["Blobs", "base_env", "classify", "head_tail_split", "join_head_tail", "make_step", "split_outputs"]

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
            # Only relative *paths* are anchored there; flags such as GO111MODULE=off stay as they are.
            relative_path = "/" in value and not posixpath.isabs(value)
            env[key] = posixpath.join(workdir, value) if relative_path else value
    env.update(extra)
    return env


class Blobs:
    """The blob area of one request: parts appended in order, each addressed by ``[offset, length]``."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> list[int]:
        """Append ``data``; returns where it lies in the area."""
        where = [self.size, len(data)]
        self.parts.append(data)
        self.size += len(data)
        return where


def head_tail_split(limits: Limits) -> tuple[int, int]:
    """Bytes kept from the start and from the end of a stream: the split of ``sandboxkit.output``."""
    return _split(limits.output_bytes, limits.output_head_fraction)


def make_step(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float,
    limits: Limits,
    blobs: Blobs,
    stdin: bytes = b"",
    compile_step: bool = False,
    python: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One step for the runner. CPU time is capped a second above the wall timeout, so a busy
    loop dies by SIGXCPU even if the runner's own timer were late.

    What is private to the run (argv, env, cwd, the Python script and its args) goes into the
    blob area, never into the JSON header: the runner zeroes the blob area after each reply and
    never decodes it itself (only the forked child does), so none of it is left in the memory
    later runs inherit. Raises ``UnicodeEncodeError`` for text that is not valid UTF-8 (the
    caller checks first and raises ``InvalidRequest``).
    """
    private = {"argv": list(argv), "env": dict(env), "cwd": cwd}
    if python is not None:
        private["python"] = dict(python)
    head, tail = head_tail_split(limits)
    step: dict[str, Any] = {
        "private": blobs.add(json.dumps(private, ensure_ascii=False, separators=(",", ":")).encode("utf-8")),
        "timeout": timeout_s,
        "cpu": math.ceil(timeout_s) + 1,
        "head": head,
        "tail": tail,
        "stop": limits.stop_bytes(),
        "nofile": COMPILE_NOFILE if compile_step else NOFILE,
        "fsize": None if compile_step or limits.file_size_mb is None else limits.file_size_mb << 20,
        "gate": compile_step,
    }
    if stdin:
        step["stdin"] = blobs.add(stdin)
    return step


def join_head_tail(facts: Sequence[int], blob: bytes, pos: int) -> tuple[bytes, bool, int]:
    """One stream from the reply: ``facts`` = (head bytes, tail bytes, total) as the runner counted.

    Returns the text (head + :func:`~sandboxkit.output.cut_marker` + tail when bytes were cut, as
    :func:`~sandboxkit.output.cut_head_tail` gives for the whole stream), whether it was cut, and
    where the next stream starts in ``blob``.
    """
    head, tail, total = (int(x) for x in facts) if facts else (0, 0, 0)
    kept = blob[pos : pos + head + tail]
    if total <= head + tail:
        return kept, False, pos + head + tail
    return kept[:head] + cut_marker(total - head - tail) + kept[head:], True, pos + head + tail


def split_outputs(steps: Sequence[Mapping[str, Any]], blob: bytes) -> list[tuple[bytes, bytes]]:
    """Cut the reply's blob area into each step's (stdout, stderr), in order, cuts marked."""
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    for step in steps:
        stdout, _, pos = join_head_tail(step.get("out") or (), blob, pos)
        stderr, _, pos = join_head_tail(step.get("err") or (), blob, pos)
        out.append((stdout, stderr))
    return out


def _cut(facts: Sequence[int] | None) -> bool:
    return bool(facts) and int(facts[2]) > int(facts[0]) + int(facts[1])  # type: ignore[index]


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
        stdout_truncated=_cut(step.get("out")),
        stderr_truncated=_cut(step.get("err")),
        duration_s=float(step.get("duration", 0.0)),
    )
