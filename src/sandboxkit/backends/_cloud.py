"""What the cloud backends (Daytona, E2B) share: the in-sandbox wrapper script and a Sandbox base.

A cloud sandbox gives us three primitives: upload files, download files, and run one shell
command and get its stdout, stderr and exit code back. Everything else in the
:class:`~sandboxkit.base.Sandbox` contract is built here on top of them, once, so both
services run a program the same way:

* source code, input files and stdin are written through the service's *file API* (never
  by echoing them through a shell), under ``sandboxkit-ws/`` (the workspace) and
  ``sandboxkit-ctl/`` (our control files) in the sandbox user's home;
* every step runs under a small bash wrapper that enforces the limits *inside* the sandbox
  (``timeout`` on the whole process group, ``head -c`` on each stream, ``ulimit`` for CPU
  time, file size and, where the runtime allows it, address space), records the process
  group so it can be killed later, and appends a status line (exit code, elapsed time) to
  stderr, which is stripped before the result is returned;
* the host waits a grace period longer than the limit; if the service still has not
  answered, the backend kills what it can, and the sandbox is marked tainted so the pool
  replaces it rather than reusing it.

Why a wrapper rather than the services' own timeouts: both SDKs stop *waiting* at their
timeout but leave the process running in the sandbox (E2B#500; a Daytona session command
keeps its shell busy), so a pooled sandbox would keep burning CPU on the previous run.
"""

from __future__ import annotations

import abc
import math
import re
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import SecretStr

from sandboxkit.base import Sandbox
from sandboxkit.errors import InvalidRequest, SandboxCrashed, ToolchainMissing
from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status, check_relative_path

__all__ = [
    "CONTROL_DIR",
    "ENFORCED_LIMITS",
    "LABEL",
    "WORKSPACE_DIR",
    "CloudSandbox",
    "NoAnswer",
    "RawResult",
    "Step",
    "build_script",
    "never_sent",
    "parse_result",
    "redact",
    "resolve_secret",
]

#: Label / metadata key every sandbox created by sandboxkit carries (value ``"1"``).
LABEL = "sandboxkit"
#: Limits fields the in-sandbox wrapper enforces on every cloud backend (it, not the service, applies them).
ENFORCED_LIMITS = frozenset({"timeout_s", "compile_timeout_s", "output_bytes", "file_size_mb", "network"})
#: Label naming the backend object that created the sandbox (for emergency clean-up).
INSTANCE_LABEL = "sandboxkit-backend"
#: Label unique to one creation attempt, so a create that timed out can still be found.
CREATE_LABEL = "sandboxkit-create"

WORKSPACE_DIR = "sandboxkit-ws"
CONTROL_DIR = "sandboxkit-ctl"
_STATUS_MARK = "__SANDBOXKIT_STATUS__"
_MISSING_MARK = "__SANDBOXKIT_MISSING__"
_STATUS_RE = re.compile(r"\n" + _STATUS_MARK + r" rc=(\d+) ms=(\d+)\n?\Z")
_MISSING_RE = re.compile(_MISSING_MARK + r" (\S+)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OOM = re.compile(
    r"MemoryError|std::bad_alloc|OutOfMemoryError|JavaScript heap out of memory|runtime: out of memory"
    r"|cannot allocate memory|memory allocation of \d+ bytes failed"
)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret replaced by ``***`` (for messages built from SDK errors)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def never_sent(exc: BaseException) -> bool:
    """Whether a failed call provably never reached the service (the connection was never made).

    Only then can a failed *create* be known not to have created anything; any other failure
    (a timeout, a reset, a 5xx) may have, and must be followed by a search.
    """
    import httpx

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionRefusedError, httpx.ConnectError)):
            return True
        if type(current).__name__ == "ClientConnectorError":  # aiohttp's "could not connect"
            return True
        current = current.__cause__ or current.__context__
    return False


def resolve_secret(value: str | SecretStr | None, env_value: str | None) -> SecretStr | None:
    """An option, else the environment value, as a :class:`SecretStr` (so it never prints)."""
    if isinstance(value, SecretStr):
        return value if value.get_secret_value() else None
    chosen = value or env_value
    return SecretStr(chosen) if chosen else None


@dataclass(frozen=True)
class Step:
    """One command to run inside the sandbox under the wrapper.

    Attributes:
        argv: the program and its arguments (run through ``env``, so no shell parses them).
        cwd: directory relative to the workspace ("" is the workspace itself).
        env: extra environment variables of the program.
        stdin_file: control file (relative to the home directory) fed to stdin, or None.
        timeout_s: wall-clock limit; the process group is killed when it passes.
        output_bytes: cap per stream; past it the stream is cut and the program dies of SIGPIPE.
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
    file_size_mb: int | None = None
    memory_mb: int | None = None
    binaries: Sequence[str] = ()
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


def _enter(root: str) -> str:
    return f"cd -- {shlex.quote(root)} || exit 125; " if root else ""


def build_script(step: Step, root: str = "") -> str:
    """The ``bash -c '...'`` command line that runs ``step`` with its limits enforced in the sandbox.

    ``root`` is the absolute directory holding the workspace and control directories; empty
    means the command's starting directory (the sandbox user's home on E2B, where the file
    API resolves relative paths too). The program's stdout and stderr stay on their own
    streams (each capped by ``head -c``); the wrapper's status line goes last on stderr.
    """
    for key in step.env:
        if not _ENV_NAME.match(key):
            raise InvalidRequest(f"environment variable name {key!r} is not valid; use letters, digits and '_'")
    q = shlex.quote
    cap = step.output_bytes + 1  # one byte more than allowed tells us the stream overflowed
    workdir = f"{WORKSPACE_DIR}/{step.cwd}" if step.cwd else WORKSPACE_DIR
    pidfile = f'"$C"/{step.run_id}.pid'
    stdin = f'"$H"/{q(step.stdin_file)}' if step.stdin_file else "/dev/null"
    env_args = " ".join(q(f"{k}={v}") for k, v in step.env.items())
    program = (f"env {env_args} " if env_args else "") + " ".join(q(a) for a in step.argv)
    timeout = f"{step.timeout_s:.3f}".rstrip("0").rstrip(".")
    lines = [
        _enter(root) + 'H="$PWD"; C="$H"/' + CONTROL_DIR,
        f'{{ [ -d {WORKSPACE_DIR} ] && [ -d "$C" ] || mkdir -p {WORKSPACE_DIR} "$C"; }} && cd -- {q(workdir)} || '
        f"{{ echo 'sandboxkit: cannot enter directory '{q(step.cwd or '.')} >&2; exit 125; }}",
    ]
    for binary in step.binaries:
        lines.append(
            f"command -v {q(binary)} >/dev/null 2>&1 || "
            f"{{ printf '\\n{_MISSING_MARK} %s\\n' {q(binary)} >&2; exit 127; }}"
        )
    lines.append("ulimit -c 0 2>/dev/null")
    lines.append(f"ulimit -t {math.ceil(step.timeout_s) + 1} 2>/dev/null")
    if step.file_size_mb is not None:
        lines.append(f"ulimit -f {step.file_size_mb * 1024} 2>/dev/null")
    if step.memory_mb is not None:
        lines.append(f"ulimit -v {step.memory_mb * 1024} 2>/dev/null")
    lines += [
        "set -o pipefail",
        # Microseconds from bash's own clock (no fork); `date` where bash is older than 5.0.
        'S=${EPOCHREALTIME/[.,]/}; [ -n "$S" ] || S=$(date +%s%6N)',
        # The first group records its pid, then becomes `timeout`, which makes itself a process
        # group leader: killing -pid later reaches the program and everything it started.
        # fd 5 keeps the real stderr: the pipeline runs in a subshell whose own stderr is discarded,
        # so bash's job notices ("Killed", "File size limit exceeded") never reach the program's stderr.
        "exec 5>&2",
        f"( {{ {{ {{ echo $BASHPID > {pidfile}; exec timeout -k 1 {timeout} {program}; }}"
        f" <{stdin} 2>&3 3>&- 5>&- | head -c {cap} 3>&- 5>&-; }} 3>&1 1>&4 4>&-"
        f" | head -c {cap} 1>&5 4>&- 5>&-; }} 4>&1 ) 2>/dev/null",
        "rc=$?",
        'E=${EPOCHREALTIME/[.,]/}; [ -n "$E" ] || E=$(date +%s%6N)',
        f"rm -f {pidfile}",
        f"printf '\\n{_STATUS_MARK} rc=%d ms=%d\\n' \"$rc\" $(( (E - S) / 1000 )) >&5",
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
    """What a service returned for one shell command."""

    stdout: str
    stderr: str
    exit_code: int | None
    duration_s: float


class NoAnswer(Exception):
    """The service did not finish a command within the host deadline (raised by ``_shell``)."""


def _cut(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


def parse_result(raw: RawResult, step: Step, *, backend: str, sandbox_id: str) -> ExecResult:
    """Turn a wrapper's raw output into an :class:`ExecResult` (status, caps, signal).

    Raises:
        ToolchainMissing: the wrapper found a required binary missing.
    """
    stderr = raw.stderr
    missing = _MISSING_RE.search(stderr)
    if missing and raw.exit_code == 127:
        binary = missing.group(1)
        package = _package_of(binary)
        raise ToolchainMissing(
            f"{binary!r} is not installed in the sandbox image; use an image or snapshot with {package!r} installed",
            backend=backend,
            sandbox_id=sandbox_id,
        )
    rc, duration = raw.exit_code, raw.duration_s
    match = _STATUS_RE.search(stderr)
    if match:
        rc, duration = int(match.group(1)), int(match.group(2)) / 1000
        stderr = stderr[: match.start()]
    stdout, out_cut = _cut(raw.stdout, step.output_bytes)
    stderr, err_cut = _cut(stderr, step.output_bytes)
    signal = rc - 128 if rc is not None and 128 < rc <= 128 + 64 else None
    timed_out = (rc in (124, 137) and duration >= step.timeout_s * 0.99) or signal == 24  # 24 = SIGXCPU
    if out_cut or err_cut:
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


class CloudSandbox(Sandbox):
    """A :class:`Sandbox` built on three service primitives: upload, download, shell.

    Subclasses implement the primitives (and ``alive`` / ``close``); this class writes code
    and files, compiles, runs, classifies and fetches, identically for every cloud service.

    Attributes:
        grace_s: how much longer than a step's limit the host waits for the service.
        tainted: a command outlived the host deadline; processes may survive in the
            sandbox, so ``reset`` refuses and the pool replaces it.
    """

    def __init__(self, *, backend_name: str, sandbox_id: str, limits: Limits, grace_s: float) -> None:
        self.backend_name = backend_name
        self.id = sandbox_id
        self.limits = limits
        self.grace_s = grace_s
        self.tainted = False
        self.closed = False
        #: Absolute directory holding the workspace; "" = the service's default (the user's home).
        self.root = ""

    def _at(self, rel: str) -> str:
        """Path of ``rel`` (relative to the root) as the service's file API should see it."""
        return f"{self.root.rstrip('/')}/{rel}" if self.root else rel

    # ------------------------------------------------------------------ primitives

    @abc.abstractmethod
    async def _upload(self, files: Mapping[str, bytes]) -> None:
        """Write files (paths from :meth:`_at`; parent directories created)."""

    @abc.abstractmethod
    async def _download(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files (paths from :meth:`_at`), keyed by the given path; missing ones are absent."""

    @abc.abstractmethod
    async def _shell(self, command: str, *, deadline_s: float) -> RawResult:
        """Run a shell command line; raise :class:`NoAnswer` after killing it if ``deadline_s`` passes."""

    async def _control(self, command: str, *, deadline_s: float = 30.0) -> RawResult:
        """Run one of our own short commands (kill, reset); services may use a cheaper path."""
        return await self._shell(command, deadline_s=deadline_s)

    # ------------------------------------------------------------------ shared logic

    def _crashed(self, message: str) -> SandboxCrashed:
        return SandboxCrashed(message, backend=self.backend_name, sandbox_id=self.id)

    async def _step(self, step: Step) -> ExecResult:
        started = time.monotonic()
        try:
            raw = await self._shell(build_script(step, self.root), deadline_s=step.timeout_s + self.grace_s)
        except NoAnswer:
            self.tainted = True
            try:
                await self._control(kill_script(self.root), deadline_s=max(10.0, self.grace_s))
            except Exception as exc:
                raise self._crashed(
                    f"the service did not answer within {step.timeout_s + self.grace_s:g}s and the sandbox could "
                    f"not be reached to kill the command ({type(exc).__name__}); the sandbox is discarded"
                ) from exc
            return ExecResult(status=Status.TIMEOUT, duration_s=time.monotonic() - started)
        return parse_result(raw, step, backend=self.backend_name, sandbox_id=self.id)

    async def run(self, request: RunRequest) -> RunResult:
        """See :meth:`Sandbox.run`; code, files and stdin go through the file API."""
        lang: Language = resolve_language(request.language)
        limits = request.limits
        source = lang.source_name(request.code)
        run_id = uuid.uuid4().hex[:12]
        uploads: dict[str, bytes] = {self._at(f"{WORKSPACE_DIR}/{source}"): request.code.encode("utf-8")}
        for path, data in request.files.items():
            uploads[self._at(f"{WORKSPACE_DIR}/{path}")] = data
        stdin_file = f"{CONTROL_DIR}/{run_id}.stdin" if request.stdin is not None else None
        if stdin_file is not None:
            assert request.stdin is not None
            uploads[self._at(stdin_file)] = request.stdin.encode("utf-8")
        await self._upload(uploads)
        env = {**lang.env, **request.env}
        memory = None if lang.virtual_memory_hungry else limits.memory_mb
        compile_result: ExecResult | None = None
        compile_argv = lang.compile_argv(request.code)
        if compile_argv is not None:
            compile_result = await self._step(
                Step(
                    argv=compile_argv,
                    env=env,
                    timeout_s=limits.compile_timeout_s,
                    output_bytes=limits.output_bytes,
                    file_size_mb=None,
                    memory_mb=None,
                    binaries=lang.binaries,
                    run_id=run_id + "c",
                )
            )
            if not compile_result.ok:
                return RunResult(
                    status=Status.COMPILE_ERROR,
                    exit_code=compile_result.exit_code,
                    compile=compile_result,
                    language=lang.name,
                    backend=self.backend_name,
                    sandbox_id=self.id,
                    duration_s=compile_result.duration_s,
                )
        result = await self._step(
            Step(
                argv=lang.run_argv(request.code, request.argv),
                env=env,
                stdin_file=stdin_file,
                timeout_s=limits.timeout_s,
                output_bytes=limits.output_bytes,
                file_size_mb=limits.file_size_mb,
                memory_mb=memory,
                binaries=() if compile_argv is not None else lang.binaries,
                run_id=run_id,
            )
        )
        fetched: dict[str, bytes] = {}
        if request.fetch_files:
            fetched = await self.read_files(request.fetch_files)
        return RunResult(
            **result.model_dump(),
            compile=compile_result,
            files=fetched,
            language=lang.name,
            backend=self.backend_name,
            sandbox_id=self.id,
        )

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """See :meth:`Sandbox.exec`; a string runs under ``bash -c``."""
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            raise InvalidRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
        rel = ""
        if cwd not in (None, "", "."):
            try:
                rel = check_relative_path(str(cwd))
            except ValueError as exc:
                raise InvalidRequest(str(exc), backend=self.backend_name, sandbox_id=self.id) from exc
        argv = ["bash", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if not argv:
            raise InvalidRequest("command is empty", backend=self.backend_name, sandbox_id=self.id)
        run_id = uuid.uuid4().hex[:12]
        stdin_file = None
        if stdin is not None:
            stdin_file = f"{CONTROL_DIR}/{run_id}.stdin"
            await self._upload({self._at(stdin_file): stdin.encode("utf-8")})
        return await self._step(
            Step(
                argv=argv,
                cwd=rel,
                env=dict(env or {}),
                stdin_file=stdin_file,
                timeout_s=float(timeout if timeout is not None else self.limits.timeout_s),
                output_bytes=self.limits.output_bytes,
                file_size_mb=self.limits.file_size_mb,
                run_id=run_id,
            )
        )

    def _workspace_paths(self, paths: Sequence[str]) -> list[str]:
        try:
            return [check_relative_path(p) for p in paths]
        except ValueError as exc:
            raise InvalidRequest(str(exc), backend=self.backend_name, sandbox_id=self.id) from exc

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """See :meth:`Sandbox.write_files`."""
        rel = self._workspace_paths(list(files))
        data = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in files.values()]
        if rel:
            await self._upload({self._at(f"{WORKSPACE_DIR}/{p}"): d for p, d in zip(rel, data, strict=True)})

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """See :meth:`Sandbox.read_files`."""
        rel = self._workspace_paths(paths)
        if not rel:
            return {}
        full = [self._at(f"{WORKSPACE_DIR}/{p}") for p in rel]
        got = await self._download(full)
        return {orig: got[f] for orig, f in zip(paths, full, strict=True) if f in got}

    async def reset(self) -> bool:
        """Kill leftover runs and empty the workspace; False when the sandbox cannot be trusted."""
        if self.tainted or self.closed:
            return False
        try:
            raw = await self._control(reset_script(self.root))
        except Exception:
            return False
        return raw.exit_code == 0
