"""Sandbox Fusion's ``/run_code`` request and response, field for field.

The names, defaults and status strings are Sandbox Fusion's own (``memory_limit_MB`` with
its capital ``MB``, ``executor_pod_name``, ``TimeLimitExceeded``...), because verl and the
``sandbox-fusion`` client read them byte for byte. The same models serve both directions:
the server parses requests with them, and the ``sandbox_fusion`` backend parses responses.

Additions, all optional and ignored by existing clients (both the PyPI client and verl
ignore unknown keys): ``stdout_truncated`` / ``stderr_truncated`` on a command result and
``sandboxkit_status`` on the response. Sandbox Fusion itself cuts long output silently;
sandboxkit says so instead, and a sandboxkit client can recover the exact status
(``memory_exceeded``, ``output_limit``) that the three Sandbox Fusion statuses cannot carry.

This module imports only pydantic, so the client backend can use it without the
``[server]`` extra.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SANDBOX_FUSION_LANGUAGES",
    "CommandRunResult",
    "CommandRunStatus",
    "RunCodeRequest",
    "RunCodeResponse",
    "RunStatus",
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
    stdout_truncated: bool = Field(False, description="sandboxkit: stdout was cut at the output limit.")
    stderr_truncated: bool = Field(False, description="sandboxkit: stderr was cut at the output limit.")


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
