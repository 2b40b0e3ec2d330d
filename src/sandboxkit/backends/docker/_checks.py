"""Input checks of the Docker backend: bad input is an :class:`InvalidRequest` before anything runs.

Why here and not left to the engine or the kernel: a value Docker or the kernel cannot take
surfaces from deep inside as a 500 from the engine, a Go unmarshal error, an ``OverflowError``
in the runner's child or a ``UnicodeEncodeError`` on the host. Those read as a crashed sandbox
(the pool discards it and retries) or, worse, as the *program* failing. Each check names the
field, shows the bad value and says what to do instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits, check_sandbox_path

__all__ = ["NAME_MAX", "PATH_MAX", "check_env", "check_limits", "check_path", "utf8"]

_NAME = "docker"
#: Longest file name (one path component) Linux filesystems take, in bytes.
NAME_MAX = 255
#: Longest path the kernel takes, in bytes (the workspace prefix included).
PATH_MAX = 4095
#: Ceilings of what the engine and the kernel accept (memory in bytes and pids.max are int64 /
#: PID_MAX_LIMIT; the runner holds up to four streams of ``output_bytes`` in the container's memory).
CEILINGS = {
    "memory_mb": 1 << 24,  # 16 TiB
    "pids": (1 << 22) - 2,  # PID_MAX_LIMIT, less the runner
    "cpus": 1024.0,
    "file_size_mb": 1 << 40,
    "output_bytes": 1 << 30,
}


def _invalid(message: str, sandbox_id: str | None) -> InvalidRequest:
    return InvalidRequest(message, backend=_NAME, sandbox_id=sandbox_id)


def check_limits(limits: Limits, sandbox_id: str | None = None) -> None:
    """Reject limits the engine or the kernel cannot apply.

    Raises:
        InvalidRequest: a limit is above what Docker can set.
    """
    for field, ceiling in CEILINGS.items():
        value = getattr(limits, field)
        if value is not None and value > ceiling:
            raise _invalid(
                f"limits.{field}={value!r} is more than the Docker backend can apply (at most {ceiling!r}); "
                f"lower it, or leave it None for no limit where the field allows",
                sandbox_id,
            )


def utf8(text: str, what: str, sandbox_id: str | None) -> bytes:
    """``text`` as UTF-8, for ``what`` (named in the error).

    Raises:
        InvalidRequest: ``text`` holds a lone surrogate (it has no UTF-8 form).
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise _invalid(
            f"{what} is not valid Unicode text: it holds the lone surrogate {bad!r} at index {exc.start}; "
            "pass bytes for binary file content, or decode your data with errors='replace'",
            sandbox_id,
        ) from exc


def _no_nul(text: str, what: str, sandbox_id: str | None) -> None:
    if "\x00" in text:
        raise _invalid(f"{what} {text!r} contains a NUL byte, which no program can receive; remove it", sandbox_id)


def check_env(env: Mapping[str, str], argv: Iterable[str], sandbox_id: str | None) -> None:
    """Environment and arguments a process can actually receive (``execve`` takes C strings).

    Raises:
        InvalidRequest: a name is empty or has ``=``, or any text has a NUL or a lone surrogate.
    """
    for key, value in env.items():
        if not key or "=" in key:
            raise _invalid(f"environment variable name {key!r} is empty or contains '='; rename it", sandbox_id)
        for text, what in ((key, "environment variable name"), (value, f"environment variable {key!r}")):
            _no_nul(text, what, sandbox_id)
            utf8(text, what, sandbox_id)
    for arg in argv:
        _no_nul(arg, "argument", sandbox_id)
        utf8(arg, f"argument {arg!r}", sandbox_id)


def check_path(path: str, workdir: str, sandbox_id: str | None, *, absolute_ok: bool = False) -> str:
    """A path the filesystem can hold, normalised: workspace-relative, or (``absolute_ok``) absolute.

    An absolute path inside the workspace comes back relative to it, so the workspace keeps one
    route (the runner's); other absolute paths come back absolute (the engine's archive API).

    Raises:
        InvalidRequest: the path escapes the workspace (or is absolute without ``absolute_ok``),
            has a component over 255 bytes, is over 4095 bytes with the workspace prefix, or is
            not valid Unicode.
    """
    try:
        norm = check_sandbox_path(path, absolute_ok=absolute_ok)
    except ValueError as exc:
        raise _invalid(str(exc), sandbox_id) from exc
    encoded = utf8(norm, f"file path {path!r}", sandbox_id)
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            raise _invalid(
                f"file path {path!r} has a name of {len(part)} bytes; Linux allows at most {NAME_MAX} per name, "
                "shorten it",
                sandbox_id,
            )
    if len(encoded) + len(workdir) + 1 > PATH_MAX:
        raise _invalid(
            f"file path {path!r} is {len(encoded)} bytes long; with the workspace {workdir!r} it passes the "
            f"{PATH_MAX}-byte limit of Linux paths, shorten it",
            sandbox_id,
        )
    if norm.startswith("/"):
        if norm.startswith(workdir.rstrip("/") + "/"):
            return norm[len(workdir.rstrip("/")) + 1 :]
        if norm == workdir:
            raise _invalid(f"file path {path!r} names the workspace itself; give a file name", sandbox_id)
    return norm
