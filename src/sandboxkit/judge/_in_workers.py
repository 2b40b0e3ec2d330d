"""Grading rows in a multi-process pool's host workers, so the grader's own work spreads over cores.

A row's grading is mostly host work (parsing tests, building the harness, comparing outputs)
around a few sandbox runs; shipping the whole row to a worker (one message each way) spreads
that work too, where shipping each run would leave it all in the parent. The worker grades the
row against its view of the pool: the same caps (one limiter), retries and default deadline.
A worker that dies during a row costs that row its verdict so far: it is graded again from the
start on another worker (grading changes nothing outside its sandboxes), with the pool's retries
and backoff; past them the row is an ``infra_error`` with ``reward=None``, never a 0.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from sandboxkit.errors import InvalidRequest
from sandboxkit.judge.verdict import Verdict

if TYPE_CHECKING:
    from sandboxkit.pool import SandboxPool

__all__ = ["grade_row_in_workers"]


#: What a worker runs (by name): ``grade_row`` against the worker's pool (``judge.grader._grade_row_job``).
RowJob = Callable[["SandboxPool", Any, Mapping[str, Any]], Awaitable[Verdict]]


async def grade_row_in_workers(pool: SandboxPool, job: RowJob, row: Any, defaults: Mapping[str, Any]) -> Verdict | None:
    """Grade ``row`` in one of ``pool``'s workers with ``job``; ``None`` when it cannot travel (grade it here).

    A row or option that cannot be pickled (a checker given as a local function, say) is graded
    in this process instead, with the same result, only without the spread.
    """
    from sandboxkit._workers._set import WorkerLost

    workers = pool._workers
    assert workers is not None
    attempt = 0
    while True:
        try:
            return await workers.job(job, row, dict(defaults))
        except InvalidRequest:  # it cannot travel (grade_row itself never raises)
            return None
        except WorkerLost as exc:
            if attempt >= pool.retries or pool.closed:
                return Verdict(status="infra_error", infra_error=True, error=str(exc))
            await anyio.sleep(pool._core.backoff(attempt, exc))
            attempt += 1
