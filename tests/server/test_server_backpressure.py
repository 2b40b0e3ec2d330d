"""Backpressure without lost rewards (issue 18 item 1), over real loopback sockets.

A busy server delays answers; it must never let a client's read timer turn a correct program
into an error. Shown with verl 0.9.1's own reward client (``requests``, read timeout
``2 * timeout + 10`` s, only 504 retried) against ``sandboxkit serve -j 2``, and with exact
timings on the fake backend.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from sandboxkit.server.app import create_app
from sandboxkit.testing import FakeBackend
from support.marks import verl_reward_score
from support.serve import ServeProcess, uvicorn_thread


def hold_the_slot(url: str, seconds: float) -> threading.Thread:
    holder = threading.Thread(
        target=requests.post,
        args=(f"{url}/run_code",),
        kwargs={"json": {"code": f"sleep:{seconds}", "language": "python"}, "timeout": 30},
    )
    holder.start()
    time.sleep(0.3)  # the holder is in its slot
    return holder


@pytest.mark.parametrize("heartbeat", [0.3, None], ids=["heartbeat", "no-heartbeat"])
def test_a_wait_longer_than_the_client_read_timeout_still_gets_its_answer(heartbeat: float | None) -> None:
    """One slot held 2.5 s; the next request's client gives up after 1.5 s of silence (its read timeout)."""
    app = create_app(FakeBackend(), max_concurrency=1, heartbeat_s=heartbeat)
    with uvicorn_thread(app) as url:
        holder = hold_the_slot(url, 2.5)
        try:
            started = time.monotonic()
            if heartbeat is None:  # the control: without the heartbeat the client's read timer fires
                with pytest.raises(requests.ReadTimeout):
                    requests.post(f"{url}/run_code", json={"code": "ok", "language": "python"}, timeout=1.5)
                return
            resp = requests.post(f"{url}/run_code", json={"code": "ok", "language": "python"}, timeout=1.5)
            waited = time.monotonic() - started
        finally:
            holder.join()
        stats = requests.get(f"{url}/v1/stats", timeout=10).json()
    assert resp.status_code == 200 and waited > 1.5
    assert resp.text.startswith(" ")  # the spaces that kept the client reading
    assert resp.json()["status"] == "Success" and resp.json()["run_result"]["stdout"] == "ok"
    assert stats["responses"]["streamed"] == 2 and stats["responses"]["Success"] == 2  # the 2.5 s run too


def test_a_client_that_leaves_while_waiting_never_runs(tmp_path: Any) -> None:
    backend = FakeBackend()
    app = create_app(backend, max_concurrency=1, heartbeat_s=0.2)
    with uvicorn_thread(app) as url:
        holder = hold_the_slot(url, 2.0)
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as raw:
            body = json.dumps({"code": "print-never", "language": "python"}).encode()
            raw.sendall(
                b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            raw.settimeout(5)
            assert raw.recv(100).startswith(b"HTTP/1.1 200")  # the heartbeat started the answer
        holder.join()
        time.sleep(0.5)
        stats = requests.get(f"{url}/v1/stats", timeout=10).json()
    assert backend.attempts["print-never"] == 0  # the queued run was cancelled, not executed
    assert stats["responses"]["abandoned"] == 1
    assert stats["gate"]["waiting"] == 0 and stats["admission"]["requests"] == 0


def test_a_full_server_answers_504_with_retry_after_which_verl_retries() -> None:
    """Refusal is by count (and bytes), and in the one status verl retries."""
    app = create_app(FakeBackend(), max_concurrency=1, max_queue=0)
    with uvicorn_thread(app) as url:
        holder = hold_the_slot(url, 1.0)
        refused = requests.post(f"{url}/run_code", json={"code": "ok", "language": "python"}, timeout=10)
        program = "sleep:0.1"  # the fake backend echoes the program text
        cases = {"inputs": [""], "outputs": [program]}
        score, metadata = verl_reward_score().sandbox_fusion.compute_score(
            f"{url}/run_code", threading.Semaphore(1), 256, f"```python{program}```", cases
        )
        holder.join()
        stats = requests.get(f"{url}/v1/stats", timeout=10).json()
    assert refused.status_code == 504 and refused.headers["retry-after"] == "1"
    assert "server busy" in refused.json()["detail"]
    assert score == 1.0, metadata  # verl met the 504, waited 1 s, sent it again
    assert stats["admission"]["refused_busy"] >= 2


# ---------------------------------------------------------------------------- the scenario

CORRECT = "a, b = map(int, input().split())\nprint(a + b)"
LOOP = "while True:\n    pass"


@pytest.mark.slow
def test_verl_max_concurrent_256_against_two_slots_loses_no_reward() -> None:
    """512 samples (448 correct, 64 one-second infinite loops) through verl's compute_score, max_concurrent=256.

    With two run slots the last requests wait about 40 s, far past verl's read timeout of 12 s
    (``2 * 1 + 10``), and verl would score a timed-out request as an API error.
    """
    samples = [(LOOP if i % 8 == 3 else CORRECT, i) for i in range(512)]
    semaphore = threading.Semaphore(256)  # verl's max_concurrent, shared by every sample

    def score(sample: tuple[str, int]) -> tuple[float, list[dict[str, Any]]]:
        code, i = sample
        cases = {"inputs": [f"{i} {i + 1}\n"], "outputs": [f"{2 * i + 1}\n"]}
        result, metadata = verl_reward_score().sandbox_fusion.compute_score(
            run_code_url, semaphore, 512, f"```python\n{code}\n```", cases, timeout=1
        )
        return result, metadata

    with ServeProcess("--backend", "subprocess", "-j", "2") as server:
        run_code_url = server.run_code_url
        with ThreadPoolExecutor(max_workers=256) as pool:
            results = list(pool.map(score, samples))
        stats = requests.get(f"{server.url}/v1/stats", timeout=10).json()
    statuses = [{m["status"] for m in metadata} for _, metadata in results]
    lost = [i for i, s in enumerate(statuses) if s - {"success", "timeout"}]
    assert not lost, [(i, results[i][1]) for i in lost[:3]]
    for (code, _), (value, _), status in zip(samples, results, statuses, strict=True):
        assert (value, status) == ((1.0, {"success"}) if code == CORRECT else (0.0, {"timeout"}))
    assert stats["responses"]["streamed"] > 0  # some waits did outlast verl's read timeout
    assert stats["responses"].get("SandboxError", 0) == 0 and stats["admission"]["refused_busy"] == 0


def test_sandboxkit_own_client_reads_a_heartbeat_answer() -> None:
    """The ``sandbox_fusion`` backend (httpx, read timeout = compile + run + grace = 1.5 s) waits 2.5 s unharmed."""
    import asyncio

    from sandboxkit.backends.sandbox_fusion import SandboxFusionBackend
    from sandboxkit.models import Limits, RunRequest, Status

    limits = Limits(timeout_s=0.5, compile_timeout_s=0.5)
    with uvicorn_thread(create_app(FakeBackend(), max_concurrency=1, heartbeat_s=0.3)) as url:
        holder = hold_the_slot(url, 2.5)

        async def main() -> Status:
            backend = SandboxFusionBackend(url=url, request_grace_s=0.5)
            try:
                sandbox = await backend.open(limits)
                return (await sandbox.run(RunRequest(code="ok", limits=limits))).status
            finally:
                await backend.aclose()

        try:
            assert asyncio.run(main()) is Status.OK
        finally:
            holder.join()
