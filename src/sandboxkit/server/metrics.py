"""The server's Prometheus registry: the pool's collector plus the server's own counters.

``GET /metrics`` renders it with ``prometheus_client.exposition.generate_latest``. The server's
metrics (prefix ``sandboxkit_server_``): ``responses_total{outcome}`` (``Success``, ``Failed``,
``SandboxError`` for answered runs; ``invalid`` (422), ``busy`` (504); ``abandoned`` when the client
left before its answer), ``refused_total{reason}`` (``busy``, ``too_large``, ``body_timeout``,
counted by admission before the app sees the request), ``requests_inside``, ``body_bytes_inside``,
``runs_in_flight``, ``runs_waiting``, ``streamed_responses_total`` (answers that needed the
heartbeat) and the histogram ``queue_wait_seconds`` (wait for a run slot).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sandboxkit.prometheus import Histogram, PoolCollector

if TYPE_CHECKING:
    from sandboxkit.pool import SandboxPool
    from sandboxkit.server.admission import Admission
    from sandboxkit.server.gate import Gate

__all__ = ["ServerMetrics"]

_OUTCOMES = {
    b'{"status":"Success"': "Success",
    b'{"status":"Failed"': "Failed",
    b'{"status":"SandboxError"': "SandboxError",
}
_BY_HTTP = {422: "invalid", 504: "busy"}


class ServerMetrics:
    """Counts what the server answered and exposes it with the pool's metrics."""

    def __init__(self, pool: SandboxPool, gate: Gate, admission: Admission) -> None:
        from prometheus_client import CollectorRegistry

        self.gate = gate
        self.admission = admission
        self.outcomes: Counter[str] = Counter()
        self.streamed = 0
        self.queue_wait = Histogram()
        gate.observe_wait = self.queue_wait.observe
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(PoolCollector(pool))  # type: ignore[arg-type]
        self.registry.register(self)  # type: ignore[arg-type]

    def answered(self, status: int, body: bytes, *, streamed: bool) -> None:
        """Count one answer of ``/run_code``."""
        if status == 200:
            head = body[: body.index(b",")] if b"," in body[:40] else body[:40]
            self.outcomes[_OUTCOMES.get(head, "other")] += 1
        else:
            self.outcomes[_BY_HTTP.get(status, f"http_{status}")] += 1
        self.streamed += streamed

    def abandoned(self) -> None:
        """A client went away before its answer."""
        self.outcomes["abandoned"] += 1

    def response_counts(self) -> dict[str, int]:
        """Answers by outcome, as in ``responses_total``."""
        return {**dict(self.outcomes), "streamed": self.streamed}

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type."""
        from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def describe(self) -> Iterable[Any]:
        """Read at scrape time only."""
        return []

    def collect(self) -> Iterator[Any]:
        """The server's families."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        p = "sandboxkit_server"
        responses = CounterMetricFamily(f"{p}_responses", "Answers of /run_code, by outcome.", labels=["outcome"])
        for outcome, count in sorted(self.outcomes.items()):
            responses.add_metric([outcome], count)
        yield responses
        yield CounterMetricFamily(
            f"{p}_streamed_responses", "Answers that waited past the heartbeat delay.", value=self.streamed
        )
        adm = self.admission.statistics()
        refused = CounterMetricFamily(
            f"{p}_refused", "Requests refused before their body was parsed, by reason.", labels=["reason"]
        )
        for reason, count in (("busy", adm.refused_busy), ("too_large", adm.refused_too_large)):
            refused.add_metric([reason], count)
        refused.add_metric(["body_timeout"], adm.body_timeouts)
        yield refused
        yield GaugeMetricFamily(f"{p}_requests_inside", "Requests admitted and not yet answered.", value=adm.requests)
        yield GaugeMetricFamily(f"{p}_body_bytes_inside", "Body bytes those requests hold.", value=adm.bytes)
        gate = self.gate.statistics()
        yield GaugeMetricFamily(f"{p}_runs_in_flight", "Runs holding a slot.", value=gate.in_flight)
        yield GaugeMetricFamily(f"{p}_runs_waiting", "Requests waiting for a run slot.", value=gate.waiting)
        buckets, total = self.queue_wait.snapshot()
        yield HistogramMetricFamily(
            f"{p}_queue_wait_seconds", "Seconds a request waited for a run slot.", buckets=buckets, sum_value=total
        )
