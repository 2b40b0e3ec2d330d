"""Sum what every worker of ``sandboxkit serve --workers N`` counts into one view of the server.

Every family the server exports (:mod:`sandboxkit.prometheus`, :mod:`.metrics`) is a counter, a
gauge of things in flight, or a histogram, and each of those is additive across processes: the
server's ``calls_total`` is the sum of the workers', its histogram buckets the sums of theirs.
So ``/metrics`` sums samples of the same name and labels. A worker that was killed and replaced
starts its counters at zero again, which Prometheus's ``rate()`` reads as a counter reset.

``/v1/stats`` is JSON with some values that do not add (bounds, percentiles): integers are summed
except bounds (``max_*``), anything else is the first worker's, and ``per_worker`` keeps each
worker's own answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["merge_expositions", "merge_stats", "workers_exposition"]


def merge_expositions(texts: Iterable[bytes]) -> bytes:
    """Prometheus text exposition of several processes, samples of the same name and labels summed."""
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, tuple[str, str]] = {}  # name -> (type, help), first seen first
    samples: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode()):
            families.setdefault(family.name, (family.type, family.documentation))
            into = samples.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                into[key] = into.get(key, 0.0) + sample.value
    lines: list[str] = []
    for name, (kind, doc) in families.items():
        lines.append(f"# HELP {name} {_escape_help(doc)}")
        lines.append(f"# TYPE {name} {kind}")
        for (sample_name, labels), value in samples[name].items():
            label_text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            lines.append(
                f"{sample_name}{{{label_text}}} {_number(value)}" if labels else f"{sample_name} {_number(value)}"
            )
    return ("\n".join(lines) + "\n").encode()


def merge_stats(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """``/v1/stats`` of several workers as one: integers summed (bounds kept), the rest from the first."""
    if not answers:
        return {}
    merged = _merge([a for a in answers])
    assert isinstance(merged, dict)
    return merged


def workers_exposition(count: int, answered: int, restarted: int) -> bytes:
    """The server's own families about its workers, in the text format."""
    p = "sandboxkit_server"
    return (
        f"# HELP {p}_workers Worker processes the server runs (--workers).\n# TYPE {p}_workers gauge\n"
        f"{p}_workers {count}\n"
        f"# HELP {p}_workers_answered Workers whose numbers this scrape includes.\n"
        f"# TYPE {p}_workers_answered gauge\n{p}_workers_answered {answered}\n"
        f"# HELP {p}_worker_restarts Workers that died and were replaced.\n"
        f"# TYPE {p}_worker_restarts counter\n{p}_worker_restarts_total {restarted}\n"
    ).encode()


def _merge(values: list[Any], key: str = "") -> Any:
    first = values[0]
    if isinstance(first, dict):
        keys: dict[str, None] = {}
        for value in values:
            if isinstance(value, dict):
                keys.update(dict.fromkeys(value))
        return {k: _merge([v[k] for v in values if isinstance(v, dict) and k in v], k) for k in keys}
    if isinstance(first, int) and not isinstance(first, bool) and not key.startswith("max_"):
        return sum(v for v in values if isinstance(v, int))
    return first


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() else repr(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
