"""The outcome of grading one completion: per-case results, a status, and the reward.

The status answers "what went wrong first", in the order the checks run: the row's tests
could not be read (``invalid``), the sandbox infrastructure failed (``infra_error``), no code
was found (``no_code``), a banned pattern appeared (``banned``), the program did not compile
(``compile_error``), else the first case that did not pass decides (``failed`` for a wrong
answer or a runtime error, ``timeout``, ``memory_exceeded``, ``output_limit``), and ``ok``
when every case passed.

``reward`` is ``None`` for ``invalid`` and ``infra_error`` only: neither says anything about
the model, so trainers must skip the sample rather than learn from a made-up score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CaseResult",
    "CaseStatus",
    "Verdict",
    "VerdictStatus",
    "status_from_cases",
    "trim_message",
]

VerdictStatus = Literal[
    "ok",
    "failed",
    "compile_error",
    "timeout",
    "memory_exceeded",
    "output_limit",
    "banned",
    "no_code",
    "invalid",
    "infra_error",
]
CaseStatus = Literal[
    "passed",
    "wrong_answer",
    "error",
    "timeout",
    "memory_exceeded",
    "output_limit",
    "compile_error",
    "skipped",
]

#: Verdict status for the first failing case's status.
_CASE_TO_VERDICT: dict[str, VerdictStatus] = {
    "wrong_answer": "failed",
    "error": "failed",
    "timeout": "timeout",
    "memory_exceeded": "memory_exceeded",
    "output_limit": "output_limit",
    "compile_error": "compile_error",
}

ERROR_CHARS = 300


def trim_message(text: str, limit: int = ERROR_CHARS) -> str:
    """One log-friendly line: whitespace runs collapsed, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class CaseResult(BaseModel):
    """How one test case went.

    Attributes:
        index: position of the case in the problem's tests.
        type: ``stdio``, ``assert`` or ``call``.
        status: ``passed``, ``wrong_answer``, ``error`` (exception, crash, non-zero exit, ``sys.exit``),
            ``timeout``, ``memory_exceeded``, ``output_limit``, ``compile_error``, or ``skipped``
            (not run: an earlier case failed and the shaping did not need the rest).
        time_s: wall time of the case (0 when it did not run on its own).
        message: short description of the failure (a diff, an exception); empty when passed.
        score: a checker's score in [0, 1] (partial credit counts in ``pass_rate``); ``None`` without one.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    type: str
    status: CaseStatus
    time_s: float = 0.0
    message: str = ""
    score: float | None = None

    @property
    def passed(self) -> bool:
        """Whether the case passed."""
        return self.status == "passed"


def status_from_cases(cases: Sequence[CaseResult]) -> VerdictStatus:
    """``ok`` when every case passed, else the verdict status of the first case that failed."""
    for case in sorted(cases, key=lambda c: c.index):
        if case.status in _CASE_TO_VERDICT:
            return _CASE_TO_VERDICT[case.status]
    if cases and all(c.status == "passed" for c in cases):
        return "ok"
    return "failed"


class Verdict(BaseModel):
    """The graded result of one completion.

    Attributes:
        status: see the module docstring.
        passed / total: cases passed, cases in the tests (skipped cases count in ``total``).
        pass_rate: ``passed / total`` (0 when there are no cases).
        reward: the shaped reward; ``None`` only for ``invalid`` and ``infra_error``.
        cases: per-case results, in test order (empty when nothing ran).
        error: the first failure, trimmed for a log line; ``None`` when every case passed.
        extraction: how the code was found (``fenced``, ``fenced_any``, ``unterminated``, ``raw``, ``empty``).
        infra_error: the sandbox infrastructure failed (the reward is ``None``).
        language: the language the code was graded as.
        duration_s: wall time of the grading, queueing included.
        timing: where the sandbox time went, summed over the completion's runs: ``queue_s`` (waiting
            for a slot or a sandbox, plus backend overhead), ``compile_s``, ``run_s``; empty when
            nothing ran. Not in :meth:`to_dict` (its keys are fixed); ``sandboxkit grade`` writes it.
    """

    model_config = ConfigDict(frozen=True)

    status: VerdictStatus
    passed: int = 0
    total: int = 0
    pass_rate: float = 0.0
    reward: float | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    error: str | None = None
    extraction: str = ""
    infra_error: bool = False
    language: str = ""
    duration_s: float = 0.0
    timing: dict[str, float] = Field(default_factory=dict)
    #: The backend that ran the completion's last program ("" when none ran): one pool may spill
    #: over several backends (:mod:`sandboxkit.spillover`), and summaries count per backend.
    backend: str = ""

    @property
    def ok(self) -> bool:
        """True when every case passed."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A flat dict with the same keys on every path (success, failure, invalid, infrastructure).

        verl builds its per-sample columns from the *first* sample's keys, so a key that only
        some verdicts carry breaks the batch; ``error`` is ``""`` rather than missing or ``None``.
        """
        return {
            "reward": self.reward,
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "pass_rate": self.pass_rate,
            "error": self.error or "",
            "extraction": self.extraction,
            "infra_error": self.infra_error,
            "language": self.language,
            "duration_s": round(self.duration_s, 6),
        }
