"""Kept ``/run_jupyter`` sessions between clients that do not trust each other (issue 27 item 13).

The attacks, over real loopback HTTP: a client reads, uses or closes another client's kernel by
naming its ``session_id``; idle kept sessions starve ``/run_code``; a session that expired or was
closed comes back as a fresh kernel that looks like the old one (a silent loss). And the guards:
server-issued ids, a cap of the sessions' own (429), ``state_lost`` on revival, a bearer token.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import sandbox_fusion
from typer.testing import CliRunner

from sandboxkit import SandboxPool, SyncSandboxPool
from sandboxkit.cli import app as cli
from sandboxkit.errors import BackendUnavailable, InvalidRequest
from sandboxkit.server.app import create_app
from support.serve import AppClient, ServeProcess, uvicorn_thread

TIMEOUT = 60
STARVED_AFTER_S = 30


def open_session(url: str, **headers: str) -> str:
    """Open a kept session the documented way; returns the id the server issued."""
    resp = requests.post(f"{url}/run_jupyter/sessions", headers=headers, timeout=TIMEOUT)
    assert resp.status_code == 201, resp.text
    session_id: str = resp.json()["session_id"]
    return session_id


def cells(url: str, code: list[str], session_id: str | None = None, **headers: str) -> requests.Response:
    body: dict[str, Any] = {"cells": code}
    if session_id is not None:
        body["session_id"] = session_id
    return requests.post(f"{url}/run_jupyter", json=body, headers=headers, timeout=TIMEOUT)


def display(resp: requests.Response, index: int = -1) -> Any:
    assert resp.status_code == 200 and resp.json()["status"] == "Success", resp.text
    return resp.json()["cells"][index]["display"]


@pytest.fixture
def server() -> Iterator[str]:
    """Two run slots and two kept sessions, on a real socket (no heartbeat: a starved request times out)."""
    with uvicorn_thread(create_app("subprocess", max_concurrency=2, max_sessions=2, heartbeat_s=0)) as url:
        yield url


# ---------------------------------------------------------------------------- who may use a session


def test_an_id_the_server_never_issued_is_refused(server: str) -> None:
    # On main a client named any id and got a kernel under it, so a second client naming the same
    # id shared (read, overwrote) the first one's variables and files.
    victim = cells(server, ["secret = 'victim-only'"], session_id="episode-7")
    assert victim.status_code == 404 and "not issued by this server" in victim.json()["detail"], victim.text
    thief = cells(server, ["secret"], session_id="episode-7")
    assert thief.status_code == 404
    gone = requests.delete(f"{server}/run_jupyter/sessions/episode-7", timeout=TIMEOUT)
    assert gone.status_code == 404


def test_another_client_cannot_read_use_or_close_a_kept_session(server: str) -> None:
    sid = open_session(server)
    other = open_session(server)
    assert sid != other and len(sid) >= 32  # at least 128 random bits behind each id
    assert cells(server, ["secret = 'victim-only'"], session_id=sid).status_code == 200
    # Near misses of the real id (a guess that shares most of it) are ids the server never issued.
    for guess in (sid[:-1], sid[:-1] + ("A" if sid[-1] != "A" else "B"), sid.upper(), other + "x"):
        assert cells(server, ["secret"], session_id=guess).status_code == 404, guess
        assert requests.delete(f"{server}/run_jupyter/sessions/{guess}", timeout=TIMEOUT).status_code == 404
    assert display(cells(server, ["'secret' in dir()"], session_id=other)) == [{"text/plain": "False"}]
    assert display(cells(server, ["secret"], session_id=sid)) == [{"text/plain": "'victim-only'"}]


# ---------------------------------------------------------------------------- capacity


def test_idle_kept_sessions_never_starve_run_code(server: str) -> None:
    # Two run slots, two kept sessions both holding a live kernel and idle: on main they held the
    # pool's only sandboxes, and /run_code waited for one for as long as its client waited.
    for sid in (open_session(server), open_session(server)):
        assert display(cells(server, ["x = 1", "x"], session_id=sid)) == [{"text/plain": "1"}]
    body: dict[str, Any] = {"code": "print('ran')", "language": "python", "run_timeout": 2, "compile_timeout": 1}
    try:  # the bound is the test's patience, not a timing claim: starved, the request never ended
        resp = requests.post(f"{server}/run_code", json=body, timeout=STARVED_AFTER_S)
    except requests.ReadTimeout:
        pytest.fail(f"/run_code got no answer in {STARVED_AFTER_S}s while kept sessions sat idle: starved")
    assert resp.json()["status"] == "Success", resp.text
    assert resp.json()["run_result"]["stdout"] == "ran\n"
    # A one-shot notebook (the Sandbox Fusion client's kind) runs too.
    assert display(cells(server, ["6 * 7"])) == [{"text/plain": "42"}]


def test_one_session_too_many_is_429_and_closing_one_makes_room(server: str) -> None:
    first, _second = open_session(server), open_session(server)
    full = requests.post(f"{server}/run_jupyter/sessions", timeout=TIMEOUT)
    assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1, full.text
    assert "max_sessions" in full.json()["detail"]
    # The sandbox-fusion client sends no session_id: its one-shot notebooks never meet the cap.
    resp = sandbox_fusion.run_jupyter(sandbox_fusion.RunJupyterRequest(cells=["6 * 7"]), endpoint=server)
    assert resp.status == sandbox_fusion.RunStatus.Success and resp.cells[0].display == [{"text/plain": "42"}]
    closed = requests.delete(f"{server}/run_jupyter/sessions/{first}", timeout=TIMEOUT)
    assert closed.json() == {"session_id": first, "closed": True}
    assert open_session(server)


# ---------------------------------------------------------------------------- no silent loss


def test_a_deleted_session_comes_back_with_state_lost(server: str) -> None:
    sid = open_session(server)
    assert cells(server, ["x = 41"], session_id=sid).status_code == 200
    kept = cells(server, ["x + 1"], session_id=sid).json()["cells"][0]
    assert kept["display"] == [{"text/plain": "42"}] and not kept["state_lost"]
    assert requests.delete(f"{server}/run_jupyter/sessions/{sid}", timeout=TIMEOUT).json()["closed"] is True
    again = cells(server, ["'x' in dir()", "'x' in dir()"], session_id=sid)
    first, second = again.json()["cells"]
    assert first["display"] == [{"text/plain": "False"}]
    assert first["state_lost"] and first["restarted"], again.text
    assert not second["state_lost"]  # said once, on the cell that first ran without the old state
    assert "closed" in again.json()["message"]
    assert again.json()["session_id"] == sid
    # Closing twice: the id is known, there is nothing to close.
    assert requests.delete(f"{server}/run_jupyter/sessions/{sid}", timeout=TIMEOUT).json()["closed"] is True
    assert requests.delete(f"{server}/run_jupyter/sessions/{sid}", timeout=TIMEOUT).json()["closed"] is False


async def test_an_expired_session_comes_back_with_state_lost(app_client: AppClient) -> None:
    async with app_client("subprocess", max_sessions=1) as client:
        opened = await client.post("/run_jupyter/sessions")
        sid = opened.json()["session_id"]
        assert (await client.post("/run_jupyter", json={"cells": ["x = 1"], "session_id": sid})).status_code == 200
        kernels = client.app.state.kernels  # type: ignore[attr-defined]
        for kept in kernels._kept.values():  # idle past the TTL: the clock is moved, not slept on
            kept.last_used -= kernels.ttl_s + 1
        assert await kernels.expire() == 1 and len(kernels) == 0
        resp = (await client.post("/run_jupyter", json={"cells": ["'x' in dir()"], "session_id": sid})).json()
        (cell,) = resp["cells"]
        assert cell["display"] == [{"text/plain": "False"}] and cell["state_lost"], resp
        assert "expired" in resp["message"]


async def test_a_revived_session_with_no_cells_still_says_state_lost(app_client: AppClient) -> None:
    async with app_client("subprocess") as client:
        sid = (await client.post("/run_jupyter/sessions")).json()["session_id"]
        await client.delete(f"/run_jupyter/sessions/{sid}")
        resp = (await client.post("/run_jupyter", json={"cells": [], "session_id": sid})).json()
        assert resp["status"] == "Success" and resp["state_lost"] is True, resp
        later = (await client.post("/run_jupyter", json={"cells": ["1"], "session_id": sid})).json()
        assert later["state_lost"] is False and not later["cells"][0]["state_lost"]


# ---------------------------------------------------------------------------- bearer token

GUARDED: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/run_code", {"code": "print(1)", "language": "python"}),
    ("POST", "/run_jupyter", {"cells": ["1"]}),
    ("POST", "/run_jupyter/sessions", None),
    ("DELETE", "/run_jupyter/sessions/x", None),
    ("GET", "/v1/stats", None),
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
    ("GET", "/docs", None),
    ("POST", "/submit", {}),
]


def test_a_token_guards_every_endpoint_but_ping() -> None:
    with uvicorn_thread(create_app("subprocess", max_concurrency=1, token="s3cret-token")) as url:
        assert requests.get(f"{url}/v1/ping", timeout=TIMEOUT).json() == "pong"
        for method, path, body in GUARDED:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"}):
                resp = requests.request(method, url + path, json=body, headers=headers, timeout=TIMEOUT)
                assert resp.status_code == 401, (method, path, headers, resp.text)
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                assert "s3cret" not in resp.text
        auth = {"Authorization": "Bearer s3cret-token"}
        ran = requests.post(f"{url}/run_code", json=GUARDED[0][2], headers=auth, timeout=TIMEOUT)
        assert ran.json()["run_result"]["stdout"] == "1\n"
        sid = open_session(url, **auth)
        assert display(cells(url, ["2 + 2"], session_id=sid, **auth)) == [{"text/plain": "4"}]
        assert requests.get(f"{url}/v1/stats", headers=auth, timeout=TIMEOUT).status_code == 200


@pytest.mark.parametrize("token", ["", "two words", "tab\there", "caf\u00e9"])
def test_a_token_that_no_header_could_carry_is_a_usage_error(token: str) -> None:
    with pytest.raises(InvalidRequest, match="printable ASCII"):
        create_app("subprocess", token=token)
    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--token", token])
    assert result.exit_code == 2 and "printable ASCII" in result.output, result.output
    if token:
        assert token not in result.output  # a near-miss of a secret is still a secret


@pytest.mark.parametrize(("kwargs", "needle"), [({"max_sessions": 0}, "max_sessions"), ({"kernel_ttl_s": 0}, "ttl")])
def test_session_bounds_are_checked_before_serving(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(InvalidRequest, match=needle):
        create_app("subprocess", **kwargs)  # type: ignore[arg-type]


def test_sandboxkits_own_sandbox_fusion_backend_sends_the_token() -> None:
    with uvicorn_thread(create_app("subprocess", max_concurrency=1, token="t0k")) as url:
        options = {"url": url, "headers": {"Authorization": "Bearer t0k"}}
        with SyncSandboxPool("sandbox_fusion", backend_options=options) as pool:
            assert pool.run("print(3)").stdout == "3\n"
        with (
            SyncSandboxPool("sandbox_fusion", backend_options={"url": url}, retries=0) as pool,
            pytest.raises(BackendUnavailable, match="401"),
        ):
            pool.run("print(3)")


def test_an_unauthorized_large_body_is_answered_401_not_reset() -> None:
    with uvicorn_thread(create_app("subprocess", max_concurrency=1, token="t")) as url:
        big = {"code": "#" * (4 << 20), "language": "python"}
        resp = httpx.post(f"{url}/run_code", json=big, timeout=TIMEOUT)
        assert resp.status_code == 401


def test_serve_takes_the_token_from_its_option_or_the_environment() -> None:
    with ServeProcess("--max-concurrency", "1", env={"SANDBOXKIT_SERVE_TOKEN": "from-env"}) as served:
        assert requests.get(f"{served.url}/v1/stats", timeout=TIMEOUT).status_code == 401
        ok = requests.get(f"{served.url}/v1/stats", headers={"Authorization": "Bearer from-env"}, timeout=TIMEOUT)
        assert ok.status_code == 200
        assert "from-env" not in served.log()
    with ServeProcess("--max-concurrency", "1", "--token", "from-option", "--max-sessions", "1") as served:
        auth = {"Authorization": "Bearer from-option"}
        assert requests.post(f"{served.url}/run_jupyter/sessions", timeout=TIMEOUT).status_code == 401
        sid = open_session(served.url, **auth)
        assert display(cells(served.url, ["import os", "os.getpid() > 0"], session_id=sid, **auth)) == [
            {"text/plain": "True"}
        ]
        assert requests.post(f"{served.url}/run_jupyter/sessions", headers=auth, timeout=TIMEOUT).status_code == 429
    assert not served.leftover, "a kept session's kernel outlived the server's SIGTERM"


async def test_kept_sessions_close_with_the_app_even_on_a_pool_it_does_not_own(app_client: AppClient) -> None:
    async with SandboxPool("subprocess", max_concurrency=1) as pool:
        async with app_client(pool) as client:
            sid = (await client.post("/run_jupyter/sessions")).json()["session_id"]
            ran = await client.post("/run_jupyter", json={"cells": ["x = 1"], "session_id": sid})
            assert ran.json()["status"] == "Success", ran.text
            assert pool.backend.live_sandboxes == 1  # type: ignore[attr-defined]
        # The shared pool lives on; the sessions' own sandboxes went with the app.
        assert not pool.closed and pool.backend.live_sandboxes == 0  # type: ignore[attr-defined]
