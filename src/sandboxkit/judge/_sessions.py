"""Grading several cases in one sandbox session that the graded program may kill.

A compiled stdio solution (:func:`sandboxkit.judge.grader`'s session fast path) and an interactive
problem (:mod:`sandboxkit.judge.interactive`) run every case in one session. The program runs as the
sandbox's user and can kill the machinery that runs it (``kill(getppid(), SIGKILL)``, ``kill(-1,
SIGKILL)`` on the subprocess backend's fork server): the command that does it gets its own result (a
failed case), and the session's next call raises :class:`~sandboxkit.errors.SandboxCrashed`.

Blame rule: a sandbox that dies during the program's own command is that program's failure for that
case, never ``infra_error``; otherwise a policy could learn to turn a zero into "no reward" by killing
its sandbox after a wrong answer. So :func:`run_in_sessions` goes on with the remaining cases in a
fresh session. A crash before a command of the program came back in the session is the
infrastructure's (the error propagates: a backend whose sandboxes die at once must not turn a right
program's cases into failures). Each fresh session either judges a case or, when the program killed it in a
preparatory run (its compile-and-probe), charges the next case with the crash, so the loop ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sandboxkit.errors import SandboxCrashed
from sandboxkit.judge._grading_state import Job, Outcome
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.session import Session

__all__ = ["Attempt", "SessionPass", "run_in_sessions"]

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One session of a grading; the pass sets ``program_ran`` once a command of the program came back.

    Only then can a later crash be the program's doing: a command that kills its sandbox still gets its
    own result (the subprocess backend reports the killed command; Docker's runner cannot be killed),
    so a crash raised *by* the program's first command is the sandbox's, not the program's.
    """

    session: Session
    program_ran: bool = False


#: ``session_pass(job, attempt, pending, outcome)`` runs the ``pending`` cases in ``attempt.session``,
#: recording each in ``outcome.cases`` as it is judged; returns an outcome that replaces the whole
#: grading (a compile error), else ``None``.
SessionPass = Callable[[Job, Attempt, list[tuple[int, Any]], Outcome], Awaitable[Outcome | None]]


async def run_in_sessions(job: Job, group: list[tuple[int, Any]], session_pass: SessionPass) -> Outcome:
    """Run ``group`` through ``session_pass``, in a fresh session whenever the program killed the last one.

    Raises:
        SandboxCrashed: a session died before a command of the program came back in it.
        SandboxError: any other failure of the sandbox.
    """
    outcome = Outcome()
    while True:
        pending = [(index, case) for index, case in group if index not in outcome.cases]
        judged = len(outcome.cases)
        attempt: Attempt | None = None
        try:
            async with job.pool.session() as session:
                attempt = Attempt(session)
                early = await session_pass(job, attempt, pending, outcome)
            return early if early is not None else outcome
        except SandboxCrashed as exc:
            if attempt is None or not attempt.program_ran:
                raise
            if all(index in outcome.cases for index, _ in group):
                return outcome  # it died as the session closed, every case judged
            log.info("the graded program killed its sandbox; the remaining cases run in a fresh one: %s", exc)
            if len(outcome.cases) == judged:
                index, case = pending[0]
                message = trim_message(f"the program killed its sandbox before this case could run ({exc.kind})")
                outcome.cases[index] = CaseResult(index=index, type=case.type, status="error", message=message)
            if job.stop and any(not c.passed for c in outcome.cases.values()):
                return outcome
