"""Reward shaping: how a verdict becomes a number.

Two modes:

* ``pass_rate`` (default): the fraction of cases passed; every case runs.
* ``all_or_nothing`` (also ``binary``): 1.0 when every case passed, else 0.0; grading stops at the first
  failing case, since the rest cannot change the reward.

Penalties replace the reward for a verdict status, e.g. ``compile_error=-1`` (the TRL + Daytona
example gives -1 to code that errors, times out or uses a banned pattern). A penalty applies when
the verdict's status is that status, so with ``pass_rate`` a program whose first failing case timed
out gets the timeout penalty, not its partial pass rate. Statuses that may carry a penalty:
``failed``, ``compile_error``, ``timeout``, ``memory_exceeded``, ``output_limit``, ``banned``, ``no_code``.

``invalid`` and ``infra_error`` verdicts always get ``None``: a broken test or a broken sandbox says
nothing about the model, and a penalty there would teach the policy that correct code is wrong.

The string form, used by the CLI and by dataset rows: ``"pass_rate"``, ``"all_or_nothing"``, or a mode
followed by penalties: ``"pass_rate,compile_error=-1,timeout=-0.5,banned=-1"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["MODE_ALIASES", "PENALIZABLE", "Shaping", "parse_shaping"]

#: Other names accepted for the modes.
MODE_ALIASES = {"binary": "all_or_nothing", "all-or-nothing": "all_or_nothing", "pass-rate": "pass_rate"}

PENALIZABLE = frozenset({"failed", "compile_error", "timeout", "memory_exceeded", "output_limit", "banned", "no_code"})


class Shaping(BaseModel):
    """Reward shaping options (see the module docstring).

    Attributes:
        mode: ``pass_rate`` or ``all_or_nothing``.
        penalties: verdict status -> reward used instead of the mode's score.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["pass_rate", "all_or_nothing"] = "pass_rate"
    penalties: dict[str, float] = Field(default_factory=dict)

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_alias(cls, value: Any) -> Any:
        return MODE_ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("penalties")
    @classmethod
    def _known_statuses(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - PENALIZABLE)
        if unknown:
            raise ValueError(f"no penalty can be set for {unknown!r}; use some of {sorted(PENALIZABLE)!r}")
        return value

    @property
    def stop_on_first_failure(self) -> bool:
        """Whether grading may stop at the first failing case (the rest cannot change the reward)."""
        return self.mode == "all_or_nothing"

    def reward(self, status: str, passed: float, total: int) -> float | None:
        """The reward for a verdict with this status and these counts (``passed`` may hold partial credit)."""
        if status in ("invalid", "infra_error"):
            return None
        if status in self.penalties:
            return float(self.penalties[status])
        if self.mode == "all_or_nothing":
            return 1.0 if status == "ok" else 0.0
        return passed / total if total else 0.0

    def __str__(self) -> str:
        return ",".join([self.mode, *(f"{k}={v:g}" for k, v in sorted(self.penalties.items()))])


def parse_shaping(value: Shaping | str | Mapping[str, Any] | None) -> Shaping:
    """A :class:`Shaping` from a model, its string form, or a dict.

    Raises:
        ValueError: unknown mode, unknown status, or a penalty that is not a number; the message says which.
    """
    if value is None:
        return Shaping()
    if isinstance(value, Shaping):
        return value
    try:
        if isinstance(value, Mapping):
            return Shaping.model_validate(dict(value))
        if not isinstance(value, str):
            raise ValueError(f"shaping must be a string or a dict, got {type(value).__name__}")
        parts = [p.strip() for p in value.split(",") if p.strip()]
        mode = "pass_rate"
        penalties: dict[str, float] = {}
        for part in parts:
            if "=" not in part:
                mode = part
                continue
            key, _, number = part.partition("=")
            try:
                penalties[key.strip()] = float(number)
            except ValueError:
                raise ValueError(f"penalty {part!r} is not a number; write e.g. 'timeout=-1'") from None
        mode = MODE_ALIASES.get(mode, mode)
        if mode not in ("pass_rate", "all_or_nothing"):
            raise ValueError(f"unknown shaping mode {mode!r}; use 'pass_rate' or 'all_or_nothing'")
        return Shaping(mode=mode, penalties=penalties)  # type: ignore[arg-type]
    except ValidationError as exc:
        msgs = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ValueError(f"invalid shaping {value!r}: {msgs}") from exc
