"""Sandbox Fusion's ``/run_code`` wire format: the request and response models, and the mapping to sandboxkit's.

One neutral module shared by both sides of the protocol, as SWE-ReX shares its request/response
pairs: the server (:mod:`sandboxkit.server`) parses requests and writes responses with it, and the
``sandbox_fusion`` client backend writes requests and parses responses with it. Neither side imports
the other; this module imports only pydantic, :mod:`sandboxkit.models`, :mod:`sandboxkit.errors`,
:mod:`sandboxkit.languages` and :mod:`sandboxkit.output`.

Models, field for field.

The names, defaults and status strings are Sandbox Fusion's own (``memory_limit_MB`` with
its capital ``MB``, ``executor_pod_name``, ``TimeLimitExceeded``...), because verl and the
``sandbox-fusion`` client read them byte for byte. The same models serve both directions:
the server parses requests with them, and the ``sandbox_fusion`` backend parses responses.

Additions, all optional and ignored by existing clients (both the PyPI client and verl
ignore unknown keys): ``stdout_truncated`` / ``stderr_truncated`` on a command result and
``sandboxkit_status`` on the response. Sandbox Fusion itself cuts long output silently;
sandboxkit says so instead, and a sandboxkit client can recover the exact status
(``memory_exceeded``, ``output_limit``) that the three Sandbox Fusion statuses cannot carry.

Converters: four pure functions, two per direction, so a round trip through both is lossless
for everything Sandbox Fusion can express.

Status mapping (sandboxkit → Sandbox Fusion):

========================  ===========  =============================================
sandboxkit ``Status``     ``status``   command result
========================  ===========  =============================================
ok                        Success      run: Finished, return_code 0
failed                    Failed       run: Finished, return_code != 0 (-N = signal N)
timeout                   Failed       run: TimeLimitExceeded, return_code null
compile_error             Failed       compile: Finished rc != 0 or TimeLimitExceeded;
                                       run_result null
memory_exceeded           Failed       run: Finished, return_code != 0; message says why
output_limit              Failed       run: Finished, return_code != 0; message says why
(any; a stream cut)       as above     ``stdout_truncated`` / ``stderr_truncated`` set:
                                       head and tail kept, the cut marked in the text
========================  ===========  =============================================
"""

from __future__ import annotations

import base64
import binascii
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandboxkit.errors import InvalidRequest, Transient
from sandboxkit.languages import resolve_language, sandbox_fusion_name
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status, check_relative_path
from sandboxkit.output import cut_head_tail, cut_marker

__all__ = [
    "SANDBOX_FUSION_LANGUAGES",
    "CommandRunResult",
    "CommandRunStatus",
    "FieldError",
    "RunCodeRequest",
    "RunCodeResponse",
    "RunStatus",
    "request_from_sandbox_fusion",
    "request_to_sandbox_fusion",
    "result_from_sandbox_fusion",
    "result_to_sandbox_fusion",
]

#: Every value of Sandbox Fusion's ``Language`` literal (``sandbox/runners/types.py``).
SANDBOX_FUSION_LANGUAGES: tuple[str, ...] = (
    "python",
    "cpp",
    "nodejs",
    "go",
    "go_test",
    "java",
    "php",
    "csharp",
    "bash",
    "typescript",
    "sql",
    "rust",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "pytest",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
)


class RunStatus(str, Enum):
    """Top-level outcome. All three come back with HTTP 200."""

    Success = "Success"
    Failed = "Failed"  # the program failed: non-zero exit, timeout, compile error
    SandboxError = "SandboxError"  # the infrastructure failed; says nothing about the program


class CommandRunStatus(str, Enum):
    """Outcome of one command (the compile step or the run)."""

    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class RunCodeRequest(BaseModel):
    """Body of ``POST /run_code``.

    Unknown keys are ignored, as in Sandbox Fusion. ``language`` is a plain string here;
    the server checks it against what its backend supports and answers 422 otherwise.
    """

    model_config = ConfigDict(extra="ignore")

    compile_timeout: float = Field(10, description="Compile timeout in seconds (compiled languages).")
    run_timeout: float = Field(10, description="Run timeout in seconds.")
    memory_limit_MB: int = Field(-1, description="Memory limit in MiB; -1 (or any value <= 0) = the server default.")
    code: str = Field(..., examples=['print("hello")'], description="The code to run.")
    stdin: str | None = Field(None, examples=[""], description="Text passed to the program's stdin.")
    language: str = Field(..., examples=["python"], description="Sandbox Fusion language name.")
    files: dict[str, str | None] = Field(
        default_factory=dict,
        description="Relative path -> base64 content, written before the run; null values are skipped.",
    )
    fetch_files: list[str] = Field(
        default_factory=list, description="Relative paths returned (base64) after the run; missing ones are omitted."
    )


class CommandRunResult(BaseModel):
    """Result of one command. ``return_code`` is null when the command timed out."""

    model_config = ConfigDict(extra="ignore")

    status: CommandRunStatus
    execution_time: float | None = Field(None, description="Wall-clock seconds.")
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    stdout_truncated: bool = Field(
        False, description="sandboxkit: stdout was longer than the cap; its head and tail are kept."
    )
    stderr_truncated: bool = Field(
        False, description="sandboxkit: stderr was longer than the cap; its head and tail are kept."
    )


class RunCodeResponse(BaseModel):
    """Response of ``POST /run_code``.

    ``compile_result`` is null for interpreted languages; ``run_result`` is null when the
    compile step failed or timed out.
    """

    model_config = ConfigDict(extra="ignore")

    status: RunStatus
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="Fetched path -> base64 content.")
    sandboxkit_status: str | None = Field(
        None,
        description="sandboxkit: exact outcome (ok, failed, compile_error, timeout, memory_exceeded, output_limit).",
    )


_KILLED = -9  # return code reported when a limit killed the program and no exit code exists


# --------------------------------------------------------------------------- server side


class FieldError(InvalidRequest):
    """An invalid ``/run_code`` field; ``field`` names it so the server can answer 422 with a ``loc``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def request_from_sandbox_fusion(body: RunCodeRequest, defaults: Limits) -> RunRequest:
    """Build the sandboxkit request for a ``/run_code`` body.

    ``memory_limit_MB <= 0`` (Sandbox Fusion's "unlimited") keeps the server's default memory
    limit: a shared server never runs untrusted code without one.

    Raises:
        InvalidRequest: unknown language, a path that escapes the workspace, content that is
            not base64, or a timeout out of range. The message names the field.
    """
    try:
        lang = resolve_language(body.language)
    except InvalidRequest as exc:
        raise FieldError("language", exc.message) from exc
    files: dict[str, bytes] = {}
    for path, content in body.files.items():
        if content is None:  # Sandbox Fusion skips null contents
            continue
        files[_checked_path("files", path)] = _b64decode(f"files[{path!r}]", content)
    fetch = [_checked_path("fetch_files", p) for p in body.fetch_files]
    for name, value in (("run_timeout", body.run_timeout), ("compile_timeout", body.compile_timeout)):
        if not value > 0:
            raise FieldError(name, f"{name} must be a positive number of seconds, got {value!r}")
    try:
        limits = defaults.merged(
            timeout_s=body.run_timeout,
            compile_timeout_s=body.compile_timeout,
            memory_mb=body.memory_limit_MB if body.memory_limit_MB > 0 else None,
        )
    except ValueError as exc:
        field, message = _limits_error(exc)
        raise FieldError(field, message) from exc
    return RunRequest(
        code=body.code, language=lang.name, stdin=body.stdin, files=files, fetch_files=fetch, limits=limits
    )


def result_to_sandbox_fusion(result: RunResult, *, executor_pod_name: str | None = None) -> RunCodeResponse:
    """Turn a sandboxkit result into Sandbox Fusion's response (always a Success or Failed)."""
    compile_result = _command_from_exec(result.compile) if result.compile is not None else None
    run_result = None if result.status is Status.COMPILE_ERROR else _command_from_exec(result)
    return RunCodeResponse(
        status=RunStatus.Success if result.status is Status.OK else RunStatus.Failed,
        message=_message(result),
        compile_result=compile_result,
        run_result=run_result,
        executor_pod_name=executor_pod_name,
        files={path: base64.b64encode(data).decode("ascii") for path, data in result.files.items()},
        sandboxkit_status=result.status.value,
    )


def _command_from_exec(res: ExecResult) -> CommandRunResult:
    if res.status is Status.TIMEOUT:
        status, code = CommandRunStatus.TimeLimitExceeded, None
    else:
        status = CommandRunStatus.Finished
        if res.exit_code is not None:
            code = res.exit_code
        elif res.signal:
            code = -res.signal  # asyncio's (and so Sandbox Fusion's) convention for a signal
        else:
            code = _KILLED
    return CommandRunResult(
        status=status,
        execution_time=res.duration_s,
        return_code=code,
        stdout=res.stdout,
        stderr=res.stderr,
        stdout_truncated=res.stdout_truncated,
        stderr_truncated=res.stderr_truncated,
    )


def _message(result: RunResult) -> str:
    if result.status is Status.MEMORY_EXCEEDED:
        return f"memory limit exceeded ({result.language} program killed)"
    cut = " and ".join(n for n, t in (("stdout", result.stdout_truncated), ("stderr", result.stderr_truncated)) if t)
    if result.status is Status.OUTPUT_LIMIT:
        return f"output limit exceeded: the program was stopped after writing too much ({cut or 'output'} cut)"
    if cut:
        return f"{cut} longer than the server's per-stream cap: the head and the tail are kept, the middle is cut"
    return ""


# --------------------------------------------------------------------------- client side


def request_to_sandbox_fusion(request: RunRequest) -> dict[str, Any]:
    """The JSON body of ``/run_code`` for a sandboxkit request.

    Raises:
        InvalidRequest: the request uses ``env`` or ``argv``, which Sandbox Fusion cannot carry.
    """
    if request.env or request.argv:
        raise InvalidRequest(
            "Sandbox Fusion's /run_code has no env or argv fields; set them inside the code "
            "(or use exec(), which runs a bash script)"
        )
    limits = request.limits
    return {
        "compile_timeout": limits.compile_timeout_s,
        "run_timeout": limits.timeout_s,
        "memory_limit_MB": limits.memory_mb if limits.memory_mb is not None else -1,
        "code": request.code,
        "stdin": request.stdin,
        "language": sandbox_fusion_name(request.language),
        "files": {path: base64.b64encode(data).decode("ascii") for path, data in request.files.items()},
        "fetch_files": list(request.fetch_files),
    }


def result_from_sandbox_fusion(
    response: RunCodeResponse, request: RunRequest, *, backend: str, sandbox_id: str | None
) -> RunResult:
    """Turn a Success/Failed response back into a sandboxkit result.

    Output longer than ``request.limits.output_bytes`` is cut here to its head and tail
    (:func:`sandboxkit.output.cut_head_tail`) and flagged, so a remote service without an output
    cap still honours the contract. The cut changes no status: only a program the service
    stopped for its output is ``output_limit``.

    Raises:
        Transient: the response is a ``SandboxError``, or is inconsistent (no run result
            and no compile failure), or carries files that are not base64.
    """
    where = {"backend": backend, "sandbox_id": sandbox_id}
    if response.status is RunStatus.SandboxError:
        raise Transient(f"the Sandbox Fusion service reported SandboxError: {response.message!r:.500}", **where)
    compile_exec = _exec_from_command(response.compile_result) if response.compile_result is not None else None
    run = response.run_result
    status: Status
    if run is None:
        if compile_exec is None or compile_exec.status is Status.OK:
            raise Transient(f"malformed /run_code response: no run_result (status {response.status.value})", **where)
        status = Status.COMPILE_ERROR
        run_exec = ExecResult(status=status)
    else:
        run_exec = _exec_from_command(run)
        status = run_exec.status
    if response.sandboxkit_status:  # a sandboxkit server says exactly what happened
        try:
            status = Status(response.sandboxkit_status)
        except ValueError:
            pass
    stdout, out_cut = _head_tail(run_exec.stdout, request.limits)
    stderr, err_cut = _head_tail(run_exec.stderr, request.limits)
    try:
        files = {path: base64.b64decode(data, validate=True) for path, data in response.files.items()}
    except (binascii.Error, ValueError) as exc:
        raise Transient(f"malformed /run_code response: fetched files are not base64 ({exc})", **where) from exc
    return RunResult(
        status=status,
        exit_code=run_exec.exit_code,
        signal=run_exec.signal,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=run_exec.stdout_truncated or out_cut,
        stderr_truncated=run_exec.stderr_truncated or err_cut,
        duration_s=run_exec.duration_s,
        compile=compile_exec,
        files=files,
        language=request.language,
        backend=backend,
        sandbox_id=sandbox_id,
    )


def _exec_from_command(cmd: CommandRunResult) -> ExecResult:
    exit_code: int | None = None
    signal: int | None = None
    if cmd.status is CommandRunStatus.TimeLimitExceeded:
        status = Status.TIMEOUT
    elif cmd.status is CommandRunStatus.Error:
        status = Status.FAILED
    else:
        rc = cmd.return_code
        if rc is not None and rc < 0:
            signal = -rc
        else:
            exit_code = rc
        status = Status.OK if rc == 0 else Status.FAILED
    return ExecResult(
        status=status,
        exit_code=exit_code,
        signal=signal,
        stdout=cmd.stdout or "",
        stderr=cmd.stderr or "",
        stdout_truncated=cmd.stdout_truncated,
        stderr_truncated=cmd.stderr_truncated,
        duration_s=cmd.execution_time or 0.0,
    )


def _head_tail(text: str, limits: Limits) -> tuple[str, bool]:
    data = text.encode("utf-8", errors="surrogateescape")
    # A sandboxkit server already cut the stream; its marker makes it a little longer than the cap.
    if len(data) <= limits.output_bytes + len(cut_marker(limits.stop_bytes())):
        return text, False
    kept, _ = cut_head_tail(data, limits.output_bytes, limits.output_head_fraction)
    return kept.decode("utf-8", errors="replace"), True


def _checked_path(field: str, path: str) -> str:
    try:
        return check_relative_path(path)
    except ValueError as exc:
        raise FieldError(field, str(exc)) from exc


def _b64decode(field: str, content: str) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FieldError("files", f"{field} is not valid base64 ({exc}); encode file contents with base64") from exc


_SANDBOX_FUSION_FIELD = {
    "timeout_s": "run_timeout",
    "compile_timeout_s": "compile_timeout",
    "memory_mb": "memory_limit_MB",
}


def _limits_error(exc: ValueError) -> tuple[str, str]:
    """The Sandbox Fusion field and a message for a Limits validation error."""
    errors = getattr(exc, "errors", None)
    if not callable(errors) or not errors():
        return "body", f"invalid limits: {exc}"
    first = errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    field = _SANDBOX_FUSION_FIELD.get(name, "body")
    return field, f"{field}: {first['msg']} (got {first.get('input')!r})"
