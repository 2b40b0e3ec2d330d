"""A pool's metrics as Prometheus metrics, through the ``prometheus-client`` library.

``sandboxkit serve`` exposes them at ``GET /metrics``; a training process exposes the same ones
for its own pool::

    from prometheus_client import start_http_server
    from sandboxkit.prometheus import prometheus_registry

    registry = prometheus_registry(pool)          # or pass registry=REGISTRY to join the default one
    start_http_server(9100, registry=registry)

Why a collector that reads the pool, not counters the pool increments: the pool stays free of
any exporter (``prometheus-client`` is an optional dependency, extra ``[server]``), and the
numbers scraped are exactly the numbers ``pool.metrics()`` reports. Histograms are fed by
:attr:`PoolMetrics.observers <sandboxkit.metrics.PoolMetrics.observers>`, so they count every
call, not only the pool's sample window.

Metric names (all prefixed ``sandboxkit_``): ``calls_total``, ``call_status_total{status}``,
``infrastructure_errors_total{kind}``, ``retries_total``, ``sandboxes_created_total``,
``sandboxes_closed_total``, ``sandboxes_live``, ``calls_in_flight``, ``calls_waiting``,
``checkpoints_taken_total``, ``checkpoints_released_total``, ``checkpoints_open``, ``forks_total``, and the
histograms ``queue_wait_seconds``, ``run_seconds``, ``call_seconds`` and ``sandbox_open_seconds``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from sandboxkit.pool import SandboxPool

__all__ = ["DEFAULT_BUCKETS", "Histogram", "PoolCollector", "prometheus_registry"]

#: Seconds; fine below 100 ms (a warm run) and up to the longest sensible run.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

_HISTOGRAMS = {
    "queue_wait": ("queue_wait_seconds", "Seconds a call waited for a slot in the pool."),
    "run_time": ("run_seconds", "Seconds a call spent running in a sandbox (retries included)."),
    "latency": ("call_seconds", "Seconds from a call's start to its result or error."),
    "open_time": ("sandbox_open_seconds", "Seconds it took to open a sandbox."),
}


class Histogram:
    """Cumulative bucket counts and a sum, safe to feed from any thread.

    Args:
        buckets: upper bounds in seconds, increasing; ``+Inf`` is added.
    """

    def __init__(self, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.bounds = tuple(buckets)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count one sample."""
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[index] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        """``([(le, cumulative count), ...], sum)`` in the form prometheus_client expects."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return cumulative, total


class PoolCollector:
    """A prometheus_client collector for one :class:`~sandboxkit.pool.SandboxPool`.

    Args:
        pool: the pool to read.
        prefix: metric name prefix.
        buckets: histogram bucket bounds in seconds.
    """

    def __init__(self, pool: SandboxPool, prefix: str = "sandboxkit", buckets: Sequence[float] = DEFAULT_BUCKETS):
        self.pool = pool
        self.prefix = prefix
        self.histograms = {name: Histogram(buckets) for name in _HISTOGRAMS}
        pool.metrics_data.observers.append(self._observe)

    def _observe(self, name: str, seconds: float) -> None:
        histogram = self.histograms.get(name)
        if histogram is not None:
            histogram.observe(seconds)

    def describe(self) -> Iterable[Any]:
        """Nothing up front: the collector is read on each scrape (prometheus_client then skips a dry run)."""
        return []

    def collect(self) -> Iterator[Any]:
        """The metric families, built from ``pool.metrics()`` at scrape time."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        data = self.pool.metrics()
        p = self.prefix
        yield CounterMetricFamily(f"{p}_calls", "Calls started on the pool.", value=data["calls"])
        statuses = CounterMetricFamily(
            f"{p}_call_status", "Calls that returned a result, by RunResult status.", labels=["status"]
        )
        for status, count in sorted(data["statuses"].items()):
            statuses.add_metric([status], count)
        yield statuses
        errors = CounterMetricFamily(
            f"{p}_infrastructure_errors", "Calls that ended in a SandboxError, by kind.", labels=["kind"]
        )
        for kind, count in sorted(data["errors"].items()):
            errors.add_metric([kind], count)
        yield errors
        yield CounterMetricFamily(f"{p}_retries", "Retries after transient errors.", value=data["retries"])
        yield CounterMetricFamily(f"{p}_sandboxes_created", "Sandboxes opened.", value=data["sandboxes_created"])
        yield CounterMetricFamily(f"{p}_sandboxes_closed", "Sandboxes closed.", value=data["sandboxes_closed"])
        yield GaugeMetricFamily(f"{p}_sandboxes_live", "Sandboxes open now.", value=data["sandboxes_open"])
        yield GaugeMetricFamily(f"{p}_calls_in_flight", "Calls holding a slot now.", value=data["calls_in_flight"])
        yield GaugeMetricFamily(f"{p}_calls_waiting", "Calls waiting for a slot now.", value=data["calls_waiting"])
        # Checkpoints hold backend resources (a tmpfs, an archive, a cloud snapshot): one left open shows here.
        yield CounterMetricFamily(
            f"{p}_checkpoints_taken", "Checkpoints taken (Session.checkpoint).", value=data["checkpoints_taken"]
        )
        yield CounterMetricFamily(
            f"{p}_checkpoints_released", "Checkpoints released.", value=data["checkpoints_released"]
        )
        yield GaugeMetricFamily(f"{p}_checkpoints_open", "Checkpoints held now.", value=data["checkpoints_open"])
        yield CounterMetricFamily(f"{p}_forks", "Sessions forked from checkpoints.", value=data["forks"])
        for name, (metric, doc) in _HISTOGRAMS.items():
            buckets, total = self.histograms[name].snapshot()
            yield HistogramMetricFamily(f"{p}_{metric}", doc, buckets=buckets, sum_value=total)


def prometheus_registry(
    pool: SandboxPool, *, registry: CollectorRegistry | None = None, prefix: str = "sandboxkit"
) -> CollectorRegistry:
    """Register a :class:`PoolCollector` for ``pool`` and return the registry.

    Args:
        pool: the pool whose metrics to export.
        registry: an existing registry (e.g. ``prometheus_client.REGISTRY``); default a new one.
        prefix: metric name prefix (use different ones for several pools in one registry).

    Raises:
        BackendUnavailable: ``prometheus-client`` is not installed.
    """
    try:
        from prometheus_client import CollectorRegistry
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from sandboxkit.errors import BackendUnavailable

        raise BackendUnavailable(
            f'metrics export needs prometheus-client ({exc}); run: pip install "sandboxkit[server]"'
        ) from exc
    target = registry if registry is not None else CollectorRegistry(auto_describe=True)
    target.register(PoolCollector(pool, prefix))  # type: ignore[arg-type]
    return target
