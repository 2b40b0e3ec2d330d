"""``sandboxkit serve --workers N``: several processes, one run cap, one admission, one set of numbers.

Over real loopback sockets against the real CLI. What each test attacks:

* the cap: N workers that each admitted ``-j`` would run N x ``-j`` programs at once. The runs
  themselves record when they ran (the wall clock inside the sandbox), and no instant may see
  more than ``-j`` of them;
* a killed worker: its requests must end as a transport error or a 5xx, never a 200 verdict it
  did not compute; it is replaced, and the slots it held come back (the server is not left with
  ``-j`` minus what the dead worker held);
* ``/metrics`` and ``/v1/stats``: whichever worker answers, they count the whole server;
* kept ``/run_jupyter`` sessions: a session lives in one worker, and a request on a connection
  that another worker accepted still reaches it;
* SIGTERM: no process, sandbox cgroup or run directory is left behind.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from support.procs import pids, proc_stat
from support.serve import ServeProcess

TIMEOUT = 120
SLEEPER = "import time\nt0 = time.time()\ntime.sleep({sleep})\nprint(t0, time.time())"


def run_code(url: str, code: str, **extra: Any) -> requests.Response:
    """One request on a connection of its own (so the kernel may hand it to any worker)."""
    body = {"code": code, "language": "python", "run_timeout": 30, **extra}
    with requests.Session() as fresh:
        return fresh.post(f"{url}/run_code", json=body, timeout=TIMEOUT)


def intervals(responses: list[requests.Response]) -> list[tuple[float, float]]:
    """The (start, end) each run printed from inside its sandbox."""
    out = []
    for resp in responses:
        assert resp.status_code == 200 and resp.json()["status"] == "Success", resp.text
        start, end = map(float, resp.json()["run_result"]["stdout"].split())
        out.append((start, end))
    return out


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of intervals that share an instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def workers_of(server: ServeProcess) -> list[int]:
    """Pids of the server's worker processes (the supervisor's children)."""
    assert server.proc is not None
    return sorted(pid for pid in pids() if (st := proc_stat(pid)) is not None and st.ppid == server.proc.pid)


def stats(url: str) -> dict[str, Any]:
    with requests.Session() as fresh:
        body: dict[str, Any] = fresh.get(f"{url}/v1/stats", timeout=TIMEOUT).json()
    return body


def cgroups_of(pid_list: list[int]) -> list[str]:
    """Sandbox cgroups (v1 or v2) whose owner is one of ``pid_list``."""
    found = []
    for pid in pid_list:
        found += glob.glob(f"/sys/fs/cgroup/*/sandboxkit-sbx-*-p{pid}") + glob.glob(
            f"/sys/fs/cgroup/**/sandboxkit-sbx-*-p{pid}", recursive=True
        )
    return sorted(set(found))


@pytest.fixture
def two_workers_j3() -> Iterator[ServeProcess]:
    server = ServeProcess("--backend", "subprocess", "--workers", "2", "-j", "3")
    with server:
        yield server
    assert not server.leftover, "sandboxkit serve --workers 2 left processes behind after SIGTERM"


# ---------------------------------------------------------------------------- the cap


def test_the_cap_holds_across_workers_as_seen_from_inside_the_sandboxes(two_workers_j3: ServeProcess) -> None:
    url = two_workers_j3.url
    assert len(workers_of(two_workers_j3)) == 2
    code = SLEEPER.format(sleep=0.5)
    with ThreadPoolExecutor(16) as executor:
        responses = list(executor.map(lambda _: run_code(url, code), range(16)))
    spans = intervals(responses)
    per_worker = [w["gate"]["admitted"] for w in stats(url)["per_worker"]]
    assert len(per_worker) == 2 and min(per_worker) > 0, per_worker  # both workers ran some
    assert most_at_once(spans) <= 3, sorted(spans)
    # ...and the cap is the server's, not a smaller per-worker share: -j 3 runs did run at once.
    assert most_at_once(spans) == 3, sorted(spans)


def test_admission_bounds_the_whole_server() -> None:
    # -j 1 and --max-queue 1: two requests fit in the server, whatever worker accepted them.
    with ServeProcess("--backend", "subprocess", "--workers", "2", "-j", "1", "--max-queue", "1") as server:
        code = SLEEPER.format(sleep=1.5)
        with ThreadPoolExecutor(8) as executor:
            responses = list(executor.map(lambda _: run_code(server.url, code), range(8)))
        statuses = sorted(r.status_code for r in responses)
        answered = [r for r in responses if r.status_code == 200]
        assert statuses.count(504) >= 8 - 2 - 1, statuses  # at most 2 inside at once (+1 that came after one left)
        assert all(r.headers.get("retry-after") == "1" for r in responses if r.status_code == 504)
        refused = [r.json()["detail"] for r in responses if r.status_code == 504]
        assert all(d.startswith("server busy: 2 requests already inside") for d in refused), refused
        assert most_at_once(intervals(answered)) == 1
        inside = stats(server.url)["workers"]
        assert inside["requests_inside"] == 0 and inside["runs_in_flight"] == 0


# ---------------------------------------------------------------------------- a killed worker


def test_a_killed_worker_is_replaced_and_its_requests_never_get_a_verdict(two_workers_j3: ServeProcess) -> None:
    url = two_workers_j3.url
    code = SLEEPER.format(sleep=3)
    outcomes: list[Any] = []

    def one(_: int) -> None:
        try:
            outcomes.append(run_code(url, code))
        except requests.RequestException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while (now := stats(url))["workers"]["requests_inside"] < 6 or now["workers"]["runs_in_flight"] < 3:
        assert time.monotonic() < deadline, now["workers"]
        time.sleep(0.1)
    busiest = max(now["per_worker"], key=lambda w: w["admission"]["requests"])  # it holds requests
    victim = busiest["worker"]["pid"]
    os.kill(victim, signal.SIGKILL)
    for thread in threads:
        thread.join(TIMEOUT)
    verdicts = [o for o in outcomes if isinstance(o, requests.Response) and o.status_code == 200]
    errors = [o for o in outcomes if not (isinstance(o, requests.Response) and o.status_code == 200)]
    assert len(outcomes) == 6
    for resp in verdicts:  # whatever was answered 200 was computed: a correct result, or an infra error
        assert resp.json()["status"] in ("Success", "SandboxError"), resp.text
        if resp.json()["status"] == "Success":
            assert len(resp.json()["run_result"]["stdout"].split()) == 2
    for error in errors:
        assert isinstance(error, requests.RequestException) or error.status_code >= 500, error
    assert errors, "the killed worker held none of the requests; the test proved nothing"
    # Replaced, under the same number, and the dead worker's slots are back: -j 3 runs at once again.
    deadline = time.monotonic() + 60
    while len(after := workers_of(two_workers_j3)) < 2 or victim in after:
        assert time.monotonic() < deadline, after
        time.sleep(0.2)
    while stats(url)["workers"]["workers_serving"] < 2:  # the replacement serves (its cleanup is done)
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert stats(url)["workers"]["workers_restarted"] == 1
    with ThreadPoolExecutor(9) as executor:
        spans = intervals(list(executor.map(lambda _: run_code(url, SLEEPER.format(sleep=0.5)), range(9))))
    assert most_at_once(spans) == 3
    assert not cgroups_of([victim]), "the killed worker's sandbox cgroups were left behind"


# ---------------------------------------------------------------------------- the numbers


def test_metrics_and_stats_count_the_whole_server(two_workers_j3: ServeProcess) -> None:
    url = two_workers_j3.url
    with ThreadPoolExecutor(8) as executor:
        responses = list(executor.map(lambda i: run_code(url, f"print({i})"), range(20)))
    assert [r.json()["run_result"]["stdout"] for r in responses] == [f"{i}\n" for i in range(20)]
    per_worker = [w["responses"].get("Success", 0) for w in stats(url)["per_worker"]]
    assert sum(per_worker) == 20 and min(per_worker) > 0, per_worker
    for _ in range(6):  # several scrapes, on fresh connections: any worker may answer each
        with requests.Session() as fresh:
            text = fresh.get(f"{url}/metrics", timeout=TIMEOUT).text
        samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        assert samples['sandboxkit_server_responses_total{outcome="Success"}'] == "20"
        assert samples["sandboxkit_calls_total"] == "20"
        assert samples["sandboxkit_server_workers"] == "2"
        assert samples["sandboxkit_server_workers_answered"] == "2"
        assert samples['sandboxkit_call_status_total{status="ok"}'] == "20"
        assert float(samples["sandboxkit_server_queue_wait_seconds_count"]) == 20
    total = stats(url)
    assert total["responses"]["Success"] == 20 and total["gate"]["admitted"] == 20
    assert total["gate"]["max_concurrency"] == 3  # a bound is the server's, not summed


# ---------------------------------------------------------------------------- kept sessions


def test_a_kept_session_is_reached_through_any_worker(two_workers_j3: ServeProcess) -> None:
    url = two_workers_j3.url
    ids: list[str] = []
    for _ in range(40):  # until sessions were opened on both workers
        with requests.Session() as fresh:
            resp = fresh.post(f"{url}/run_jupyter/sessions", timeout=TIMEOUT)
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["session_id"])
        if len({i.split("~")[0] for i in ids}) == 2 and len(ids) >= 4:
            break
    assert {i.split("~")[0] for i in ids} == {"w0", "w1"}, ids

    def jupyter(code: str, session_id: str) -> dict[str, Any]:
        with requests.Session() as fresh:  # a new connection: the other worker accepts it half the time
            resp = fresh.post(f"{url}/run_jupyter", json={"cells": [code], "session_id": session_id}, timeout=60)
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    for n, session_id in enumerate(ids):
        assert jupyter(f"x = {n}", session_id)["status"] == "Success"
    for _ in range(3):
        for n, session_id in enumerate(ids):
            body = jupyter("print(x)", session_id)
            assert body["cells"][0]["stdout"] == f"{n}\n" and not body["state_lost"], body
    for session_id in ids:  # closing goes to the holder too, whichever worker accepts it
        with requests.Session() as fresh:
            resp = fresh.delete(f"{url}/run_jupyter/sessions/{session_id}", timeout=60)
        assert resp.json() == {"session_id": session_id, "closed": True}
    lost = jupyter("print('new')", ids[0])
    assert lost["state_lost"] and lost["cells"][0]["stdout"] == "new\n"
    forged = ids[0].split("~")[0] + "~" + "A" * 24 + "." + ids[0].rsplit(".", 1)[1]
    with requests.Session() as fresh:
        resp = fresh.post(f"{url}/run_jupyter", json={"cells": ["1"], "session_id": forged}, timeout=60)
    assert resp.status_code == 404


def test_max_sessions_bounds_the_whole_server() -> None:
    with ServeProcess("--backend", "subprocess", "--workers", "2", "--max-sessions", "1") as server:
        with requests.Session() as fresh:
            first = fresh.post(f"{server.url}/run_jupyter/sessions", timeout=TIMEOUT)
        assert first.status_code == 201, first.text
        for _ in range(8):  # fresh connections: both workers answer some of these
            with requests.Session() as fresh:
                more = fresh.post(f"{server.url}/run_jupyter/sessions", timeout=TIMEOUT)
            assert more.status_code == 429 and more.headers["retry-after"], more.text
        assert stats(server.url)["workers"]["sessions_kept"] == 1
        with requests.Session() as fresh:
            session_id = first.json()["session_id"]
            assert fresh.delete(f"{server.url}/run_jupyter/sessions/{session_id}", timeout=TIMEOUT).json()["closed"]
        for _ in range(4):  # the seat is free again, whichever worker takes it
            with requests.Session() as fresh:
                again = fresh.post(f"{server.url}/run_jupyter/sessions", timeout=TIMEOUT)
                assert again.status_code == 201, again.text
                sid = again.json()["session_id"]
                assert fresh.delete(f"{server.url}/run_jupyter/sessions/{sid}", timeout=TIMEOUT).json()["closed"]


def test_the_token_guards_every_worker_and_the_forwarded_requests() -> None:
    env = {"SANDBOXKIT_SERVE_TOKEN": "s3cret-token"}
    with ServeProcess("--backend", "subprocess", "--workers", "2", "-j", "2", env=env) as server:
        auth = {"Authorization": "Bearer s3cret-token"}
        for _ in range(6):
            with requests.Session() as fresh:
                assert fresh.post(f"{server.url}/run_code", json={"code": "1", "language": "python"}).status_code == 401
                assert fresh.get(f"{server.url}/metrics").status_code == 401
                assert fresh.get(f"{server.url}/v1/ping").json() == "pong"
        with requests.Session() as fresh:
            session_id = fresh.post(f"{server.url}/run_jupyter/sessions", headers=auth).json()["session_id"]
        for _ in range(6):
            with requests.Session() as fresh:
                body = {"cells": ["print(7)"], "session_id": session_id}
                assert fresh.post(f"{server.url}/run_jupyter", json=body).status_code == 401
                resp = fresh.post(f"{server.url}/run_jupyter", json=body, headers=auth)
                assert resp.json()["cells"][0]["stdout"] == "7\n", resp.text
        with requests.Session() as fresh:
            text = fresh.get(f"{server.url}/metrics", headers=auth).text
        assert "sandboxkit_server_workers_answered 2" in text


# ---------------------------------------------------------------------------- SIGTERM


def test_sigterm_drains_and_leaves_nothing_behind() -> None:
    server = ServeProcess("--backend", "subprocess", "--workers", "2", "-j", "2")
    server.start()
    try:
        url = server.url
        workers = workers_of(server)
        match = re.search(r"their sockets are in (\S+)", server.log())
        assert match is not None and os.path.isdir(match.group(1)), server.log()
        run_dir = match.group(1)
        with requests.Session() as fresh:
            session_id = fresh.post(f"{url}/run_jupyter/sessions", timeout=TIMEOUT).json()["session_id"]
            fresh.post(f"{url}/run_jupyter", json={"cells": ["y = 1"], "session_id": session_id}, timeout=60)
        slow: list[requests.Response] = []
        thread = threading.Thread(target=lambda: slow.append(run_code(url, SLEEPER.format(sleep=2))))
        thread.start()
        deadline = time.monotonic() + 60
        while stats(url)["workers"]["runs_in_flight"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert server.stop() == 0  # SIGTERM: the run in flight finishes first
        thread.join(TIMEOUT)
        assert slow and slow[0].status_code == 200 and slow[0].json()["status"] == "Success"
        assert not server.leftover, "processes left behind after SIGTERM"
        assert not [pid for pid in workers if proc_stat(pid) is not None]
        assert not cgroups_of(workers), "sandbox cgroups left behind after SIGTERM"
        assert not os.path.exists(run_dir), "the run directory was left behind"
    finally:
        server.stop()


def test_a_second_server_on_the_same_port_is_refused_not_merged(two_workers_j3: ServeProcess) -> None:
    port = two_workers_j3.url.rsplit(":", 1)[1]
    second = ServeProcess("--backend", "subprocess", "--workers", "2")
    second.args[second.args.index("--port") + 1] = port
    with pytest.raises(RuntimeError, match="in use"):
        second.start()
    second.stop()


def test_a_second_sigterm_stops_without_waiting_for_open_requests() -> None:
    server = ServeProcess("--backend", "subprocess", "--workers", "2", "-j", "2")
    server.start()
    try:
        assert server.proc is not None
        workers = workers_of(server)
        outcome: list[Any] = []

        def long_run() -> None:
            try:
                outcome.append(run_code(server.url, SLEEPER.format(sleep=100), run_timeout=120))
            except requests.RequestException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=long_run)
        thread.start()
        deadline = time.monotonic() + 60
        while stats(server.url)["workers"]["runs_in_flight"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(1)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0  # long before the 100 s run would have ended
        thread.join(TIMEOUT)
        assert outcome and not (isinstance(outcome[0], requests.Response) and outcome[0].status_code == 200)
        assert not [pid for pid in workers if proc_stat(pid) is not None]
        assert not cgroups_of(workers), "sandbox cgroups left behind"
    finally:
        server.stop()
    assert not server.leftover


def test_a_session_of_a_killed_worker_comes_back_as_lost_not_as_unknown(two_workers_j3: ServeProcess) -> None:
    url = two_workers_j3.url
    by_worker: dict[str, str] = {}
    for _ in range(40):
        with requests.Session() as fresh:
            session_id = fresh.post(f"{url}/run_jupyter/sessions", timeout=TIMEOUT).json()["session_id"]
        by_worker.setdefault(session_id.split("~")[0], session_id)
        if len(by_worker) == 2:
            break
    assert set(by_worker) == {"w0", "w1"}
    for session_id in by_worker.values():
        body = {"cells": ["z = 5"], "session_id": session_id}
        assert requests.post(f"{url}/run_jupyter", json=body, timeout=TIMEOUT).json()["status"] == "Success"
    victim = next(w["worker"]["pid"] for w in stats(url)["per_worker"] if w["worker"]["index"] == 0)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # 503 (or a closed connection) while worker 0 is being replaced, then its answer
        try:
            with requests.Session() as fresh:
                body = {"cells": ["print(globals().get('z'))"], "session_id": by_worker["w0"]}
                resp = fresh.post(f"{url}/run_jupyter", json=body, timeout=TIMEOUT)
            if resp.status_code == 200:
                break
            assert resp.status_code == 503 and resp.headers["retry-after"], resp.text
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.2)
    answer = resp.json()
    assert answer["state_lost"] and answer["cells"][0]["stdout"] == "None\n", answer  # said, never silent
    kept = {"cells": ["print(z)"], "session_id": by_worker["w1"]}
    assert requests.post(f"{url}/run_jupyter", json=kept, timeout=TIMEOUT).json()["cells"][0]["stdout"] == "5\n"
