"""Over real loopback sockets: bad input to ``sandboxkit serve``, and verl's 504 retry against a saturated server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
import requests

from sandboxkit.server.app import create_app
from sandboxkit.testing import FakeBackend
from support.marks import verl_reward_score
from support.serve import ServeProcess, uvicorn_thread

JSON = {"content-type": "application/json"}


def assert_still_serving(url: str) -> None:
    resp = requests.post(f"{url}/run_code", json={"code": "print('still here')", "language": "python"}, timeout=60)
    assert resp.status_code == 200 and resp.json()["run_result"]["stdout"] == "still here\n"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b'{"code": "print(1)", "language": "python"', 422, "JSON decode error"),
        (b'{"code": "print(1)", "language": "brainfuck"}', 422, "brainfuck"),
        (b'{"code": "x", "language": "python", "files": {"../../tmp/pwn": "eA=="}}', 422, ".."),
        (b'{"code": "x", "language": "python", "fetch_files": ["/etc/shadow"]}', 422, "absolute"),
    ],
)
def test_bad_input_over_a_socket(sk_serve: ServeProcess, body: bytes, status: int, needle: str) -> None:
    resp = requests.post(sk_serve.run_code_url, data=body, headers=JSON, timeout=60)
    assert resp.status_code == status
    assert needle in json.dumps(resp.json())
    assert_still_serving(sk_serve.url)


def test_huge_body_gets_413_not_a_connection_reset(sk_serve: ServeProcess) -> None:
    huge = json.dumps({"code": "#" * (40 * 1024 * 1024), "language": "python"}).encode()  # over the 32 MiB default
    resp = requests.post(sk_serve.run_code_url, data=huge, headers=JSON, timeout=120)
    assert resp.status_code == 413
    assert "too large" in resp.json()["detail"]
    assert_still_serving(sk_serve.url)


# ---------------------------------------------------------------------------- verl and 504


@pytest.fixture
def saturated_server() -> Iterator[str]:
    """A server with one run slot and a 0.3 s queue timeout, on the fake backend (exact timings)."""
    app = create_app(FakeBackend(), max_concurrency=1, queue_timeout_s=0.3)
    with uvicorn_thread(app) as url:
        yield url


def test_verl_retries_the_504_of_a_saturated_server_and_scores_correctly(saturated_server: str) -> None:
    # The fake backend echoes the program text, and 'sleep:0.6' holds the only slot for 0.6 s:
    # the other cases wait 0.3 s, get 504, and verl sends them again 1 s (then 2 s) later.
    program = "sleep:0.6"
    cases = {"inputs": ["", "", ""], "outputs": [program] * 3}
    score, metadata = verl_reward_score().sandbox_fusion.compute_score(
        f"{saturated_server}/run_code", threading.Semaphore(8), 256, f"```python{program}```", cases, timeout=2
    )
    stats = requests.get(f"{saturated_server}/v1/stats", timeout=10).json()["gate"]
    assert score == 1.0, metadata
    assert stats["rejected_queue_timeout"] >= 1  # verl saw 504s and recovered from them
    assert stats["admitted"] == 3
