"""Building a validated :class:`~sandboxkit.models.RunRequest` from the pool's keyword arguments.

Shared by :class:`~sandboxkit.pool.SandboxPool` and :class:`~sandboxkit.session.Session`, so a bad
request is rejected the same way (an ``InvalidRequest`` naming the field) before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits, RunRequest

__all__ = ["make_request", "positive_timeout", "validation_message"]


def make_request(
    code: str | RunRequest | Mapping[str, Any],
    *,
    language: str | None = None,
    stdin: str | None = None,
    files: Mapping[str, bytes | str] | None = None,
    fetch_files: Sequence[str] | None = None,
    limits: Limits | None = None,
    timeout: float | None = None,
    default_limits: Limits | None = None,
) -> RunRequest:
    """Build a validated :class:`RunRequest` from keyword arguments, a dict or a request.

    Raises:
        InvalidRequest: a field is invalid (unknown language, ``..`` in a path, negative timeout).
    """
    try:
        if isinstance(code, RunRequest):
            req = code
        elif isinstance(code, Mapping):
            data = dict(code)
            data.setdefault("limits", limits or default_limits or Limits())
            req = RunRequest.model_validate(data)
        else:
            data2: dict[str, Any] = {"code": code, "limits": limits or default_limits or Limits()}
            if language is not None:
                data2["language"] = language
            if stdin is not None:
                data2["stdin"] = stdin
            if files:
                data2["files"] = dict(files)
            if fetch_files:
                data2["fetch_files"] = list(fetch_files)
            req = RunRequest.model_validate(data2)
        if timeout is not None:
            req = req.model_copy(update={"limits": req.limits.merged(timeout_s=positive_timeout(timeout))})
        return req
    except ValidationError as exc:
        raise InvalidRequest(validation_message(exc)) from exc


def positive_timeout(timeout: float) -> float:
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise InvalidRequest(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "request"
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg} (got {err.get('input')!r:.80})")
    return "invalid request: " + "; ".join(parts)
