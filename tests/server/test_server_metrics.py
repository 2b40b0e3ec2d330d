"""``GET /metrics``: Prometheus text that the library's own parser reads, with counters that match a known workload."""

from __future__ import annotations

import subprocess
from typing import Any

import requests
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sandboxkit.pool import SandboxPool
from sandboxkit.prometheus import prometheus_registry
from sandboxkit.server.app import create_app
from sandboxkit.testing import FakeBackend
from support.serve import uvicorn_thread

#: program text -> times sent. The fake backend's behaviour is its program text.
WORKLOAD = {"ok": 3, "fail": 2, "transient:1": 1, "transient:99": 1, "crash": 1}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, keyed by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def run_workload(url: str) -> list[int]:
    codes = []
    for program, times in WORKLOAD.items():
        for _ in range(times):
            resp = requests.post(f"{url}/run_code", json={"code": program, "language": "python"}, timeout=30)
            codes.append(resp.status_code)
    codes.append(requests.post(f"{url}/run_code", json={"code": "x", "language": "cobol"}, timeout=30).status_code)
    return codes


def test_curl_metrics_parses_and_counts_the_workload_exactly() -> None:
    pool = SandboxPool(FakeBackend(), max_concurrency=2, retries=1, backoff_base_s=0.01)
    with uvicorn_thread(create_app(pool)) as url:
        codes = run_workload(url)
        curl = subprocess.run(["curl", "-sS", "-D", "/dev/stderr", f"{url}/metrics"], capture_output=True, timeout=30)
    head, text = curl.stderr.decode(), curl.stdout.decode()
    assert codes == [200] * 8 + [422]
    assert "content-type: text/plain; version=" in head.lower()
    got = samples(text)

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    # The pool: 8 calls; transient:1 recovered after 1 retry, transient:99 failed after 1 retry.
    assert value("sandboxkit_calls_total") == 8
    assert value("sandboxkit_call_status_total", status="ok") == 4
    assert value("sandboxkit_call_status_total", status="failed") == 2
    assert value("sandboxkit_infrastructure_errors_total", kind="transient") == 1
    assert value("sandboxkit_infrastructure_errors_total", kind="sandbox_crashed") == 1
    assert value("sandboxkit_retries_total") == 2
    assert value("sandboxkit_call_seconds_count") == 8
    assert value("sandboxkit_run_seconds_count") == 8
    assert value("sandboxkit_call_seconds_bucket", le="+Inf") == 8
    assert value("sandboxkit_sandboxes_created_total") >= 1
    assert value("sandboxkit_sandboxes_live") == value("sandboxkit_sandboxes_created_total") - value(
        "sandboxkit_sandboxes_closed_total"
    )
    assert value("sandboxkit_calls_in_flight") == 0
    # The server: what the clients were answered.
    assert value("sandboxkit_server_responses_total", outcome="Success") == 4
    assert value("sandboxkit_server_responses_total", outcome="Failed") == 2
    assert value("sandboxkit_server_responses_total", outcome="SandboxError") == 2
    assert value("sandboxkit_server_responses_total", outcome="invalid") == 1
    assert value("sandboxkit_server_queue_wait_seconds_count") == 8
    assert value("sandboxkit_server_refused_total", reason="busy") == 0
    assert value("sandboxkit_server_requests_inside") == 0


def test_a_training_process_exports_its_own_pool() -> None:
    import asyncio

    async def main() -> tuple[bytes, Any]:
        async with SandboxPool(FakeBackend(), max_concurrency=2) as pool:
            registry = prometheus_registry(pool)
            await asyncio.gather(*(pool.run(code) for code in ("ok", "ok", "fail")))
            return generate_latest(registry), pool.metrics()

    text, metrics = asyncio.run(main())
    got = samples(text.decode())
    assert got[("sandboxkit_calls_total", ())] == metrics["calls"] == 3
    assert got[("sandboxkit_call_status_total", (("status", "failed"),))] == 1
    assert got[("sandboxkit_queue_wait_seconds_count", ())] == 3
