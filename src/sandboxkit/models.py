"""Request and result models shared by every backend, the pool, the server and the adapters.

All models are pydantic v2 and round-trip through JSON. Bytes (file contents) travel as
base64 in JSON; in Python a ``str`` file body is accepted and stored as UTF-8 bytes.
Program output (``stdout`` / ``stderr``) is text decoded with replacement characters, so
a program that prints invalid UTF-8 still yields a valid result.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "ExecRequest",
    "ExecResult",
    "Limits",
    "RunRequest",
    "RunResult",
    "Status",
    "check_relative_path",
    "check_sandbox_path",
    "decode_output",
]


class Status(str, Enum):
    """How a program ended. A model's failure is one of these, never an exception."""

    OK = "ok"
    FAILED = "failed"  # non-zero exit or killed by a signal other than our limits
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"
    MEMORY_EXCEEDED = "memory_exceeded"
    OUTPUT_LIMIT = "output_limit"  # a stream passed limits.stop_bytes(); killed, output cut to head + tail


# defer_build: schemas are built on first use, which keeps `import sandboxkit` cheap.
_FROZEN = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64", defer_build=True)


class Limits(BaseModel):
    """Resource limits for one run. ``None`` means "the backend's default / unlimited".

    A backend enforces what it can and lists the fields it enforces in its capabilities;
    the wall timeout is always enforced (inside the sandbox and again by the host with a grace).
    """

    model_config = _FROZEN

    timeout_s: float = Field(10.0, gt=0, le=24 * 3600, description="Wall-clock limit of the run.")
    compile_timeout_s: float = Field(30.0, gt=0, le=3600, description="Wall-clock limit of the compile step.")
    memory_mb: int | None = Field(1024, gt=0, description="Memory limit of the program (and of the compiler).")
    cpus: float | None = Field(1.0, gt=0, description="CPU share (cores); CPU *time* is capped at timeout_s.")
    pids: int | None = Field(128, gt=0, description="Processes/threads the program may have at once.")
    output_bytes: int = Field(
        1 << 20, gt=0, description="Bytes kept per stream; longer output keeps its head and tail, cut marked."
    )
    output_head_fraction: float = Field(
        0.5, ge=0, le=1, description="Share of output_bytes kept from the start of a long stream (the rest: its end)."
    )
    output_stop_bytes: int | None = Field(
        None,
        gt=0,
        description="A stream passing this many bytes stops the program (output_limit); None = max(64 MiB, output_bytes).",
    )
    file_size_mb: int | None = Field(64, gt=0, description="Largest file the program may write.")
    network: bool = Field(False, description="Whether the program may use the network.")

    def stop_bytes(self) -> int:
        """Bytes per stream after which the program is stopped with ``output_limit``."""
        from sandboxkit.output import DEFAULT_STOP_BYTES

        if self.output_stop_bytes is not None:
            return max(self.output_stop_bytes, self.output_bytes)
        return max(DEFAULT_STOP_BYTES, self.output_bytes)

    def merged(self, **overrides: Any) -> Limits:
        """Return a copy with the non-``None`` overrides applied (validated)."""
        data = self.model_dump()
        data.update({k: v for k, v in overrides.items() if v is not None})
        return Limits.model_validate(data)


def check_relative_path(path: str) -> str:
    """Normalise a sandbox path and reject anything that could escape the workspace.

    Raises:
        ValueError: for an empty path, an absolute path, a NUL byte, a ``..`` component, a name
            over 255 bytes (what every Linux filesystem allows) or text that is not valid Unicode.
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ValueError(f"file path {path!r} is empty or contains a NUL byte; use a relative path like 'data/in.txt'")
    if path.startswith("/") or path.startswith("\\"):
        raise ValueError(f"file path {path!r} is absolute; use a path relative to the sandbox workspace")
    parts = path.replace("\\", "/").split("/")
    if ".." in parts:
        raise ValueError(f"file path {path!r} contains '..'; paths must stay inside the sandbox workspace")
    try:
        too_long = [part for part in parts if len(part.encode("utf-8")) > 255]
    except UnicodeEncodeError:
        raise ValueError(
            f"file path {path!r} is not valid Unicode (a lone surrogate); use a proper text path"
        ) from None
    if too_long:
        raise ValueError(f"file path {path!r} has a name over 255 bytes ({too_long[0][:40]!r}...); use shorter names")
    norm = posixpath.normpath(path.replace("\\", "/"))
    if norm in (".", ""):
        raise ValueError(f"file path {path!r} names the workspace itself; give a file name")
    return norm


def check_sandbox_path(path: str, *, absolute_ok: bool) -> str:
    """Normalise a path given to a sandbox: workspace-relative, or absolute where the sandbox has its own root.

    A backend whose sandboxes have a filesystem of their own (``Capabilities.absolute_paths``)
    passes ``absolute_ok=True``: ``/testbed/x.txt`` then names that file *inside the sandbox*, never
    the host's. This check is lexical; a backend still resolves symlinks against the sandbox's
    root when it opens the file (a program may plant ``etc -> /etc``).

    Returns:
        The normalised path: relative (as :func:`check_relative_path` returns it), or absolute
        with exactly one leading ``/``.

    Raises:
        ValueError: what :func:`check_relative_path` refuses; an absolute path when ``absolute_ok``
            is False; ``/`` itself; a ``..`` component anywhere (even one that would stay inside).
    """
    if not absolute_ok or not isinstance(path, str) or not path.startswith("/"):
        return check_relative_path(path)
    if "\x00" in path:
        raise ValueError(f"file path {path!r} contains a NUL byte; remove it")
    parts = path.split("/")
    if ".." in parts:
        raise ValueError(f"file path {path!r} contains '..'; give the path without it, like '/testbed/data/in.txt'")
    rest = check_relative_path(path.lstrip("/")) if path.strip("/") else None
    if rest is None:
        raise ValueError(f"file path {path!r} names the sandbox's root directory; give a file name")
    return "/" + rest


def decode_output(data: bytes) -> str:
    """Decode program output as UTF-8, replacing invalid bytes (never raises)."""
    return data.decode("utf-8", errors="replace")


class RunRequest(BaseModel):
    """Run ``code`` in ``language``: write it and ``files``, compile if needed, run with ``stdin``."""

    model_config = _FROZEN

    code: str
    language: str = "python"
    stdin: str | None = None
    files: dict[str, bytes] = Field(default_factory=dict, description="Files written to the workspace first.")
    fetch_files: list[str] = Field(default_factory=list, description="Workspace files returned after the run.")
    limits: Limits = Field(default_factory=Limits)
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the program.")
    argv: list[str] = Field(default_factory=list, description="Extra command-line arguments for the program.")

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        from sandboxkit.languages import resolve_language  # local: languages imports models

        return resolve_language(value).name

    @field_validator("files", mode="before")
    @classmethod
    def _text_files_as_utf8(cls, value: Any, info: ValidationInfo) -> Any:
        # In JSON, file bodies are base64 (val_json_bytes); in Python a str body is its UTF-8 text.
        if isinstance(value, dict) and info.mode == "python":
            return {k: (v.encode("utf-8") if isinstance(v, str) else v) for k, v in value.items()}
        return value

    @field_validator("files")
    @classmethod
    def _safe_file_paths(cls, value: dict[str, bytes]) -> dict[str, bytes]:
        return {check_relative_path(k): v for k, v in value.items()}

    @field_validator("fetch_files")
    @classmethod
    def _safe_fetch_paths(cls, value: list[str]) -> list[str]:
        return [check_relative_path(p) for p in value]


class ExecRequest(BaseModel):
    """Run ``command`` in a sandbox's workspace: a shell command line (a string) or an argv list.

    What :meth:`Sandbox.exec <sandboxkit.base.Sandbox.exec>` takes as keywords, as one value: the
    base class checks it once (:meth:`of`) and hands it to the backend's ``exec_request``, so no
    backend declares the keyword list or repeats the checks.
    """

    model_config = _FROZEN

    command: str | list[str]
    cwd: str | None = Field(None, description="Working directory: relative to the workspace, or absolute.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    stdin: str | None = None
    timeout_s: float | None = Field(None, description="Overrides the sandbox's limits.timeout_s for this call.")

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("exec needs a non-empty command")
        return value

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {value!r}")
        return value

    @classmethod
    def of(
        cls,
        command: str | Sequence[object],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
        backend: str | None = None,
        sandbox_id: str | None = None,
    ) -> ExecRequest:
        """The request for ``Sandbox.exec``'s arguments (an argv's parts as text).

        Raises:
            InvalidRequest: the command is an empty list, or the timeout is not a positive number.
        """
        from sandboxkit.errors import InvalidRequest  # local: keeps the models module free of the error tree

        try:
            return cls(
                command=command if isinstance(command, str) else [str(part) for part in command],
                cwd=cwd,
                env=dict(env or {}),
                stdin=stdin,
                timeout_s=timeout,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidRequest(
                str(first.get("ctx", {}).get("error", first["msg"])), backend=backend, sandbox_id=sandbox_id
            ) from None

    def exec_keywords(self) -> dict[str, Any]:
        """The keywords of ``Sandbox.exec`` besides the command that this request stands for.

        For a wrapper that hands the request to an inner sandbox through ``exec`` (the one method a
        plugin written before ``exec_request`` implements): the field-to-keyword mapping
        (``timeout_s`` is ``timeout=``) is then written once, here beside the fields.
        """
        return {"cwd": self.cwd, "env": self.env, "stdin": self.stdin, "timeout": self.timeout_s}

    def argv(self, shell: str = "bash") -> list[str]:
        """The argv to start: ``[shell, "-c", command]`` for a command line, else the list itself."""
        return [shell, "-c", self.command] if isinstance(self.command, str) else list(self.command)


class ExecResult(BaseModel):
    """Outcome of one command or program run inside a sandbox."""

    model_config = _FROZEN

    status: Status
    exit_code: int | None = Field(None, description="Exit code; None when killed or never started.")
    signal: int | None = Field(None, description="Signal that ended the process, if any.")
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the program exited 0 within its limits."""
        return self.status is Status.OK


class RunResult(ExecResult):
    """Outcome of :class:`RunRequest`: the run itself plus the compile step and fetched files.

    When compilation fails, ``status`` is ``compile_error``, ``compile`` holds the compiler's
    output, and ``stdout``/``stderr`` are empty because the program never ran.
    """

    compile: ExecResult | None = None
    files: dict[str, bytes] = Field(default_factory=dict, description="Fetched files that existed.")
    language: str = "python"
    backend: str = ""
    sandbox_id: str | None = None

    @model_validator(mode="after")
    def _compile_error_has_compile(self) -> RunResult:
        if self.status is Status.COMPILE_ERROR and self.compile is None:
            raise ValueError("a compile_error result must carry the compile step's ExecResult")
        return self
