"""Turn how a process ended into a :class:`~sandboxkit.models.Status`, and per-run rlimits.

Kept apart from the spawning code because the cold path and the fork server end processes
the same way and must classify them identically.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass
from typing import Any, TypeVar

from sandboxkit.models import ExecResult, Limits, Status, decode_output

__all__ = ["Outcome", "classify", "rlimits_for"]

# What runtimes print when an allocation fails under RLIMIT_AS / a memory cgroup. Checked only
# on a non-zero exit, and only in the last part of stderr, so a program that merely prints the
# words while succeeding is never misclassified.
_OOM_PATTERNS = re.compile(
    rb"MemoryError|std::bad_alloc|java\.lang\.OutOfMemoryError|JavaScript heap out of memory"
    rb"|runtime: out of memory|cannot allocate memory|memory allocation of \d+ bytes failed"
)
_OOM_TAIL = 4096

#: Open files a program may hold at once (enough for any judge task, small enough to contain fd bombs).
NOFILE = 256


@dataclass
class Outcome:
    """Raw facts about a finished process, before classification."""

    returncode: int | None  # exit code, or None when killed by a signal
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    timed_out: bool = False
    output_limit: bool = False
    oom_killed: bool = False


R = TypeVar("R", bound=ExecResult)


def classify(o: Outcome, model: type[R] = ExecResult, **extra: Any) -> R:  # type: ignore[assignment]
    """Map an :class:`Outcome` to ``model`` (an ``ExecResult`` or ``RunResult``) with the right status.

    Built with ``model_construct``: every value comes from this backend, typed already (``extra``
    too: the compile step's result, fetched files, names), and the status is never
    ``compile_error``, the one a model validator checks. Validation cost several microseconds a run.
    """
    if o.output_limit:
        status = Status.OUTPUT_LIMIT
    elif o.timed_out or o.signal == signal.SIGXCPU:
        status = Status.TIMEOUT
    elif o.oom_killed:
        status = Status.MEMORY_EXCEEDED
    elif o.returncode == 0:
        status = Status.OK
    elif _OOM_PATTERNS.search(o.stderr[-_OOM_TAIL:]):
        status = Status.MEMORY_EXCEEDED
    else:
        status = Status.FAILED
    values = {
        "status": status,
        "exit_code": o.returncode,
        "signal": o.signal,
        "stdout": decode_output(o.stdout),
        "stderr": decode_output(o.stderr),
        "stdout_truncated": o.stdout_truncated,
        "stderr_truncated": o.stderr_truncated,
        "duration_s": o.duration_s,
        **extra,
    }
    return _built(model, values)


#: Per result model: its field names in order, where ``_built`` may set them directly (else None).
_PLAIN_FIELDS: dict[type[ExecResult], tuple[str, ...] | None] = {}


def _built(model: type[R], values: dict[str, Any]) -> R:
    """``model.model_construct(**values)``, in one step when ``values`` holds every field in order.

    ``model_construct`` looks up each field's aliases and default (some 40 calls for a
    ``RunResult``, a few microseconds of a warm run's host CPU); with every field given there is
    nothing to look up. Any other case (a field left out, a model with aliases, extras or a
    post-init hook) goes to ``model_construct``.
    """
    names = _PLAIN_FIELDS.get(model, ())
    if names == ():
        names = _PLAIN_FIELDS[model] = _plain_fields(model)
    if names is None or tuple(values) != names:
        return model.model_construct(**values)  # type: ignore[return-value]  # pydantic types it as the base
    built = model.__new__(model)
    object.__setattr__(built, "__dict__", values)
    object.__setattr__(built, "__pydantic_fields_set__", set(names))
    object.__setattr__(built, "__pydantic_extra__", None)
    object.__setattr__(built, "__pydantic_private__", None)
    return built


def _plain_fields(model: type[ExecResult]) -> tuple[str, ...] | None:
    if model.__pydantic_post_init__ or model.model_config.get("extra") == "allow" or model.__private_attributes__:
        return None
    fields = model.model_fields
    if any(f.alias is not None or f.validation_alias is not None for f in fields.values()):
        return None
    return tuple(fields)


def rlimits_for(limits: Limits, timeout_s: float, *, address_space: bool) -> list[tuple[int, int]]:
    """The ``(resource, value)`` pairs to set in the child before it runs.

    Args:
        limits: the run's limits.
        timeout_s: wall timeout of this step; CPU time is capped a second above it, so a
            busy loop dies by SIGXCPU even if the host-side timer were late.
        address_space: apply ``RLIMIT_AS`` = memory limit. False for runtimes that reserve
            far more virtual memory than they use (JVM, Go, V8); those rely on the cgroup.
    """
    import resource

    out = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, math.ceil(timeout_s) + 1),
        (resource.RLIMIT_NOFILE, NOFILE),
    ]
    if limits.file_size_mb is not None:
        out.append((resource.RLIMIT_FSIZE, limits.file_size_mb << 20))
    if limits.memory_mb is not None and address_space:
        out.append((resource.RLIMIT_AS, limits.memory_mb << 20))
    return out
