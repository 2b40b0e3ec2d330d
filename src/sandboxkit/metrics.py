"""Per-call metrics of a pool: queue wait, run time, retries, statuses and errors by kind.

Kept deliberately cheap (a few counter updates per call, bounded sample windows) because
it sits on the hot path of every call.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from typing import Any

__all__ = ["CallRecord", "PoolMetrics", "percentile"]

WINDOW = 10_000


def percentile(samples: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``samples`` by nearest rank; 0.0 when empty."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class CallRecord:
    """Timings of one call, filled in as it progresses."""

    __slots__ = ("queue_wait", "retries", "run_time")

    def __init__(self) -> None:
        self.queue_wait = 0.0
        self.run_time = 0.0
        self.retries = 0


class PoolMetrics:
    """Counters and sample windows; :meth:`snapshot` turns them into a plain dict."""

    def __init__(self) -> None:
        self.calls = 0
        self.retries = 0
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.sandboxes_created = 0
        self.sandboxes_closed = 0
        self.checkpoints_taken = 0
        self.checkpoints_released = 0
        self.forks = 0
        self.queue_wait: deque[float] = deque(maxlen=WINDOW)
        self.run_time: deque[float] = deque(maxlen=WINDOW)
        self.latency: deque[float] = deque(maxlen=WINDOW)
        self.open_time: deque[float] = deque(maxlen=WINDOW)
        #: Called with (name, seconds) for every "queue_wait", "run_time", "latency" and "open_time"
        #: sample, so an exporter (sandboxkit.prometheus) can keep exact histograms past the window.
        self.observers: list[Callable[[str, float], None]] = []

    def _observe(self, name: str, seconds: float) -> None:
        for observer in self.observers:
            observer(name, seconds)

    def call_started(self) -> CallRecord:
        self.calls += 1
        return CallRecord()

    def _finish(self, record: CallRecord, total: float) -> None:
        self.retries += record.retries
        self.queue_wait.append(record.queue_wait)
        self.run_time.append(record.run_time)
        self.latency.append(total)
        if self.observers:
            self._observe("queue_wait", record.queue_wait)
            self._observe("run_time", record.run_time)
            self._observe("latency", total)

    def call_finished(self, record: CallRecord, result: Any, total: float) -> None:
        status = getattr(result, "status", None)
        self.statuses[getattr(status, "value", "done")] += 1
        self._finish(record, total)

    def call_failed(self, record: CallRecord, exc: Exception, total: float) -> None:
        self.errors[getattr(exc, "kind", type(exc).__name__)] += 1
        self._finish(record, total)

    def error(self, kind: str) -> None:
        self.errors[kind] += 1

    def sandbox_opened(self, seconds: float) -> None:
        self.sandboxes_created += 1
        self.open_time.append(seconds)
        if self.observers:
            self._observe("open_time", seconds)

    def sandbox_closed(self) -> None:
        self.sandboxes_closed += 1

    def checkpoint_taken(self) -> None:
        self.checkpoints_taken += 1

    def checkpoint_released(self) -> None:
        self.checkpoints_released += 1

    def forked(self, sessions: int) -> None:
        self.forks += sessions

    def snapshot(self) -> dict[str, Any]:
        def summary(window: deque[float]) -> dict[str, float]:
            samples = list(window)
            mean = sum(samples) / len(samples) if samples else 0.0
            return {"mean": mean, "p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99)}

        return {
            "calls": self.calls,
            "retries": self.retries,
            "statuses": dict(self.statuses),
            "errors": dict(self.errors),
            "sandboxes_created": self.sandboxes_created,
            "sandboxes_closed": self.sandboxes_closed,
            "checkpoints_taken": self.checkpoints_taken,
            "checkpoints_released": self.checkpoints_released,
            "forks": self.forks,
            "queue_wait_s": summary(self.queue_wait),
            "run_time_s": summary(self.run_time),
            "latency_s": summary(self.latency),
            "open_time_s": summary(self.open_time),
        }
