"""The in-sandbox wrapper of the cloud backends: builds its bash command line, parses what it prints.

Pure functions, no I/O: the cloud backends (:mod:`sandboxkit.backends._cloud_sandbox`) send the command
line through their service and hand the raw answer back to :func:`parse_result`.

What the wrapper enforces inside the sandbox, around one program (one :class:`Step`):

* ``timeout`` on the program's whole process group (recorded in a pid file, so the host can
  kill it later if the service stops answering);
* ``ulimit`` on the program only: CPU time, file size and, where the runtime allows it,
  address space (never on the wrapper's own helpers, which write the output files);
* each output stream goes through ``head -c <stop + 1>`` into a file of the control directory;
  a stream past ``stop`` ends the program (SIGPIPE) and the result is ``output_limit``;
* once the program ends, each file is cut to its head and tail if it is longer than the cap
  and printed *base64-encoded* on the wrapper's stdout, after one status line (exit code,
  elapsed time, full stream sizes).

Why files and base64 rather than the command's own stdout/stderr: Daytona returns session
output through a line-labelling daemon (``printf '<prefix>%s\\n'`` per line read with bash's
``read``), which adds a newline to an unterminated last line and drops NUL bytes; E2B decodes
each output chunk as UTF-8 on its own. Base64 text survives both, so the program's bytes come
back exactly, on every service, in the same round trip. The program never writes to the
wrapper's stdout (its streams go to the files), so it cannot forge the status line.

What the wrapper does *not* enforce: ``network``. The service sets it when the sandbox is
created (Daytona's ``network_block_all``, E2B's ``allow_internet_access``), from the pool's
limits; see each backend's ``_create``.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from sandboxkit.errors import InvalidRequest, ToolchainMissing
from sandboxkit.models import ExecResult, Limits, Status, decode_output
from sandboxkit.output import DEFAULT_STOP_BYTES, cut_marker, head_tail_split

__all__ = [
    "CONTROL_DIR",
    "WORKSPACE_DIR",
    "OutputCaps",
    "RawResult",
    "Step",
    "build_script",
    "keep_head_tail",
    "kill_script",
    "output_caps",
    "parse_result",
    "reset_script",
]

WORKSPACE_DIR = "sandboxkit-ws"
CONTROL_DIR = "sandboxkit-ctl"
_STATUS_MARK = "__SANDBOXKIT_STATUS__"
_MISSING_MARK = "__SANDBOXKIT_MISSING__"
_END_MARK = "__SANDBOXKIT_END__"
# The wrapper owns its stdout: the status line, then each stream's base64 lines closed by an end mark.
_FRAME_RE = re.compile(
    r"^" + _STATUS_MARK + r" rc=(\d+) ms=(\d+) out=(\d+) err=(\d+)\n"
    r"([A-Za-z0-9+/=\n]*?)" + _END_MARK + r"\n([A-Za-z0-9+/=\n]*?)" + _END_MARK + r"$",
    re.MULTILINE,
)
_MISSING_RE = re.compile(r"^" + _MISSING_MARK + r" (\S+)$", re.MULTILINE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OOM = re.compile(
    r"MemoryError|std::bad_alloc|OutOfMemoryError|JavaScript heap out of memory|runtime: out of memory"
    r"|cannot allocate memory|memory allocation of \d+ bytes failed"
)


class OutputCaps(TypedDict):
    """The output fields of a :class:`Step`, taken from a run's :class:`~sandboxkit.models.Limits`."""

    output_bytes: int
    head_fraction: float
    stop_bytes: int


def output_caps(limits: Limits) -> OutputCaps:
    """``Step(..., **output_caps(limits))``: every step caps its output by the same three limits."""
    return OutputCaps(
        output_bytes=limits.output_bytes, head_fraction=limits.output_head_fraction, stop_bytes=limits.stop_bytes()
    )


@dataclass(frozen=True)
class Step:
    """One command to run inside the sandbox under the wrapper.

    Attributes:
        argv: the program and its arguments (run through ``env``, so no shell parses them).
        cwd: directory relative to the workspace ("" is the workspace itself), or an absolute one.
        env: extra environment variables of the program.
        stdin_file: control file (relative to the home directory) fed to stdin, or None.
        timeout_s: wall-clock limit; the process group is killed when it passes.
        output_bytes: bytes kept per stream; a longer stream keeps its head and tail.
        head_fraction: share of ``output_bytes`` kept from the start of a long stream.
        stop_bytes: a stream passing this many bytes stops the program (``output_limit``).
        file_size_mb: largest file the program may write (``ulimit -f``).
        memory_mb: address-space limit (``ulimit -v``), or None where the runtime needs more.
        binaries: executables that must exist, checked before running (ToolchainMissing otherwise).
        run_id: names the control files of this step.
    """

    argv: Sequence[str]
    cwd: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    stdin_file: str | None = None
    timeout_s: float = 10.0
    output_bytes: int = 1 << 20
    head_fraction: float = 0.5
    stop_bytes: int = DEFAULT_STOP_BYTES
    file_size_mb: int | None = None
    memory_mb: int | None = None
    binaries: Sequence[str] = ()
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def split(self) -> tuple[int, int]:
        """Bytes kept from the head and from the tail of a stream longer than ``output_bytes``."""
        return head_tail_split(self.output_bytes, self.head_fraction)


def _enter(root: str) -> str:
    return f"cd -- {shlex.quote(root)} || exit 125; " if root else ""


def build_script(step: Step, root: str = "") -> str:
    """The ``bash -c '...'`` command line that runs ``step`` with its limits enforced in the sandbox.

    ``root`` is the absolute directory holding the workspace and control directories; empty
    means the command's starting directory (the sandbox user's home on E2B, where the file
    API resolves relative paths too). The wrapper's stdout is the frame :func:`parse_result`
    reads; the program's own streams never reach it.
    """
    for key in step.env:
        if not _ENV_NAME.match(key):
            raise InvalidRequest(f"environment variable name {key!r} is not valid; use letters, digits and '_'")
    q = shlex.quote
    stop = max(step.stop_bytes, step.output_bytes) + 1  # one byte more than allowed tells us it overflowed
    head, tail = step.split()
    # An absolute cwd is a directory of the sandbox's own filesystem (capabilities.absolute_paths).
    workdir = step.cwd if step.cwd.startswith("/") else (f"{WORKSPACE_DIR}/{step.cwd}" if step.cwd else WORKSPACE_DIR)
    pidfile = f'"$C"/{step.run_id}.pid'
    out, err = f'"$C"/{step.run_id}.out', f'"$C"/{step.run_id}.err'
    stdin = f'"$H"/{q(step.stdin_file)}' if step.stdin_file else "/dev/null"
    env_args = " ".join(q(f"{k}={v}") for k, v in step.env.items())
    program = (f"env {env_args} " if env_args else "") + " ".join(q(a) for a in step.argv)
    timeout = f"{step.timeout_s:.3f}".rstrip("0").rstrip(".")
    ulimits = ["ulimit -c 0", f"ulimit -t {math.ceil(step.timeout_s) + 1}"]
    if step.file_size_mb is not None:
        ulimits.append(f"ulimit -f {step.file_size_mb * 1024}")
    if step.memory_mb is not None:
        ulimits.append(f"ulimit -v {step.memory_mb * 1024}")
    limit_program = "; ".join(f"{u} 2>/dev/null" for u in ulimits)
    lines = [
        _enter(root) + 'H="$PWD"; C="$H"/' + CONTROL_DIR,
        f'{{ [ -d {WORKSPACE_DIR} ] && [ -d "$C" ] || mkdir -p {WORKSPACE_DIR} "$C"; }} && cd -- {q(workdir)} || '
        f"{{ echo 'sandboxkit: cannot enter directory '{q(step.cwd or '.')} >&2; exit 125; }}",
    ]
    for binary in step.binaries:
        lines.append(
            f"command -v {q(binary)} >/dev/null 2>&1 || {{ printf '{_MISSING_MARK} %s\\n' {q(binary)}; exit 127; }}"
        )
    lines += [
        "set -o pipefail",
        # Microseconds from bash's own clock (no fork); `date` where bash is older than 5.0.
        'S=${EPOCHREALTIME/[.,]/}; [ -n "$S" ] || S=$(date +%s%6N)',
        # The innermost group records its pid, limits itself, then becomes `timeout`, which makes
        # itself a process group leader: killing -pid later reaches the program and its children.
        # Its stdout goes through one `head` into the .out file, its stderr (via fd 3) through the
        # other into the .err file; the subshell's stderr is discarded, so bash's job notices
        # ("Killed", "File size limit exceeded") never mix with the program's output.
        f"( {{ {{ {{ echo $BASHPID > {pidfile}; {limit_program}; exec timeout -k 1 {timeout} {program}; }}"
        f" <{stdin} 2>&3 3>&- | head -c {stop} >{out} 3>&-; }} 3>&1 | head -c {stop} >{err}; }} ) 2>/dev/null",
        "rc=$?",
        'E=${EPOCHREALTIME/[.,]/}; [ -n "$E" ] || E=$(date +%s%6N)',
        f"set -- $(stat -c %s {out} {err} 2>/dev/null || {{ wc -c <{out}; wc -c <{err}; }})",
        f'k() {{ if [ "$2" -gt {step.output_bytes} ]; then {{ head -c {head} "$1"; tail -c {tail} "$1"; }} | base64;'
        f' elif [ "$2" -gt 0 ]; then base64 "$1"; fi; echo {_END_MARK}; }}',
        f'printf \'{_STATUS_MARK} rc=%d ms=%d out=%d err=%d\\n\' "$rc" $(( (E - S) / 1000 )) "${{1:-0}}" "${{2:-0}}"',
        f'k {out} "${{1:-0}}"; k {err} "${{2:-0}}"',
        f"rm -f {pidfile} {out} {err}",  # one fork for all three; the program has ended
        'exit "$rc"',
    ]
    return "bash -c " + q("\n".join(lines))


def kill_script(root: str = "") -> str:
    """Command that kills every process group a wrapper recorded (and removes the records)."""
    body = _enter(root) + (
        f'for f in {CONTROL_DIR}/*.pid; do [ -f "$f" ] || continue; '
        'p=$(cat "$f" 2>/dev/null); [ -n "$p" ] && kill -KILL -- "-$p" 2>/dev/null; rm -f "$f"; done; true'
    )
    return "bash -c " + shlex.quote(body)


def reset_script(root: str = "") -> str:
    """Command that kills leftover runs and empties the workspace and control directories."""
    body = _enter(root) + (
        f'for f in {CONTROL_DIR}/*.pid; do [ -f "$f" ] || continue; '
        'p=$(cat "$f" 2>/dev/null); [ -n "$p" ] && kill -KILL -- "-$p" 2>/dev/null; done; '
        f"rm -rf {WORKSPACE_DIR} {CONTROL_DIR} && mkdir -p {WORKSPACE_DIR} {CONTROL_DIR}"
    )
    return "bash -c " + shlex.quote(body)


@dataclass(frozen=True)
class RawResult:
    """What a service returned for one shell command (its text streams as the service gave them)."""

    stdout: str
    stderr: str
    exit_code: int | None
    duration_s: float


def keep_head_tail(kept: bytes, total: int, step: Step) -> tuple[bytes, bool]:
    """The stream as the caller sees it, from the bytes the wrapper kept and the stream's full size.

    The wrapper sends the whole stream when it fits in ``output_bytes``, else its head and tail
    back to back; this puts :func:`~sandboxkit.output.cut_marker` between them, exactly as
    :func:`~sandboxkit.output.cut_head_tail` does on the other backends.
    """
    if total <= step.output_bytes:
        return kept, False
    head, _ = step.split()
    return kept[:head] + cut_marker(total - len(kept)) + kept[head:], True


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return b""


def parse_result(raw: RawResult, step: Step, *, backend: str, sandbox_id: str) -> ExecResult:
    """Turn a wrapper's raw output into an :class:`ExecResult` (status, head+tail output, signal).

    When the frame is missing (the wrapper could not start: a directory it cannot enter, or
    a service that answered with something else), the service's own streams are returned as
    they came, with its exit code.

    Raises:
        ToolchainMissing: the wrapper found a required binary missing.
    """
    missing = _MISSING_RE.search(raw.stdout)
    if missing and raw.exit_code == 127:
        binary = missing.group(1)
        package = _package_of(binary)
        raise ToolchainMissing(
            f"{binary!r} is not installed in the sandbox image; use an image or snapshot with {package!r} installed",
            backend=backend,
            sandbox_id=sandbox_id,
        )
    frame = _FRAME_RE.search(raw.stdout)
    if frame is None:
        rc, duration = raw.exit_code, raw.duration_s
        stdout, stderr, out_cut, err_cut, flooded = raw.stdout, raw.stderr, False, False, False
    else:
        rc, duration = int(frame.group(1)), int(frame.group(2)) / 1000
        out_total, err_total = int(frame.group(3)), int(frame.group(4))
        out_bytes, out_cut = keep_head_tail(_b64(frame.group(5)), out_total, step)
        err_bytes, err_cut = keep_head_tail(_b64(frame.group(6)), err_total, step)
        stdout, stderr = decode_output(out_bytes), decode_output(err_bytes)
        flooded = max(out_total, err_total) > max(step.stop_bytes, step.output_bytes)
    signal = rc - 128 if rc is not None and 128 < rc <= 128 + 64 else None
    timed_out = (rc in (124, 137) and duration >= step.timeout_s * 0.99) or signal == 24  # 24 = SIGXCPU
    if flooded:
        status = Status.OUTPUT_LIMIT
    elif timed_out:
        status = Status.TIMEOUT
    elif rc == 0:
        status = Status.OK
    elif rc is not None and _OOM.search(stderr[-4096:]):
        status = Status.MEMORY_EXCEEDED
    else:
        status = Status.FAILED
    return ExecResult(
        status=status,
        exit_code=None if signal is not None else rc,
        signal=signal,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=out_cut,
        stderr_truncated=err_cut,
        duration_s=duration,
    )


def _package_of(binary: str) -> str:
    from sandboxkit.languages import LANGUAGES

    for lang in LANGUAGES.values():
        if binary in lang.binaries:
            return lang.package
    return binary
