"""Server-side ceilings on what a ``/run_code`` request may ask for.

A shared server must not let one client lift the limits the operator set: without ceilings a
request could ask for ``memory_limit_MB: 8000000`` (no memory cap at all), ``run_timeout: 86400``
(a slot held for a day), or values so large that the child crashes setting them and the run is
reported as the *program* failing.

Decided per field:

* ``run_timeout``, ``compile_timeout`` and ``memory_limit_MB`` above the ceiling are **lowered to
  the ceiling**, and the response's ``message`` says so. Not 422: Sandbox Fusion clients (verl's
  reward path in particular) send the same configured values with every request and do not retry
  a 422, so refusing would turn a whole training run's rewards into API errors over a setting the
  operator can see in the message and fix once;
* ``memory_limit_MB <= 0`` (Sandbox Fusion's "unlimited") means the server's default, never
  unlimited (unchanged);
* a timeout that is not a positive finite number is still a 422 (it is a malformed request, not a
  large one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sandboxkit.protocols.sandbox_fusion import FieldError, RunCodeRequest

__all__ = ["Ceilings"]


@dataclass(frozen=True)
class Ceilings:
    """The most a request may ask for.

    Attributes:
        run_timeout_s: largest ``run_timeout``.
        compile_timeout_s: largest ``compile_timeout``.
        memory_mb: largest ``memory_limit_MB``.
    """

    run_timeout_s: float = 300.0
    compile_timeout_s: float = 300.0
    memory_mb: int = 8192

    def __post_init__(self) -> None:
        for name in ("run_timeout_s", "compile_timeout_s", "memory_mb"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"ceiling {name} must be a positive number, got {value!r}")

    def apply(self, body: RunCodeRequest) -> tuple[RunCodeRequest, list[str]]:
        """Return the request with every field at most its ceiling, and one note per lowered field.

        Raises:
            FieldError: a timeout is not a positive finite number (answered 422).
        """
        notes: list[str] = []
        update: dict[str, float | int] = {}
        for field, ceiling in (("run_timeout", self.run_timeout_s), ("compile_timeout", self.compile_timeout_s)):
            value = getattr(body, field)
            if not (math.isfinite(value) and value > 0):
                raise FieldError(field, f"{field} must be a positive number of seconds, got {value!r}")
            if value > ceiling:
                update[field] = ceiling
                notes.append(f"{field} {value:g} s lowered to this server's ceiling {ceiling:g} s")
        if body.memory_limit_MB > self.memory_mb:
            update["memory_limit_MB"] = self.memory_mb
            notes.append(f"memory_limit_MB {body.memory_limit_MB} lowered to this server's ceiling {self.memory_mb}")
        return (body.model_copy(update=update) if update else body), notes
