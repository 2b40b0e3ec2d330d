"""``POST /run_jupyter``: the real ``sandbox-fusion`` client unchanged, and kept sessions (``session_id``).

The client runs against ``sandboxkit serve`` as a process (the session-wide ``sk_serve``); the
session extension is driven in-process (``app_client``), where the idle clock can be moved
instead of slept on.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
import sandbox_fusion
from sandbox_fusion import RunJupyterRequest, RunStatus

from support.serve import AppClient, ServeProcess

EXAMPLE = [
    "a = 123",
    "a",
    "print(a)",
    'import sys; sys.stderr.write("stderr message")',
    'raise RuntimeError("error message")',
]


@pytest.fixture
def endpoint(sk_serve: ServeProcess) -> Iterator[str]:
    from sandbox_fusion import config

    saved = (config.SANDBOX_ENDPOINT, config.DATASET_ENDPOINT)
    sandbox_fusion.set_endpoint(sk_serve.url)
    yield sk_serve.url
    config.SANDBOX_ENDPOINT, config.DATASET_ENDPOINT = saved


def test_sandbox_fusion_client_run_jupyter(endpoint: str) -> None:
    files = {"data.txt": base64.b64encode(b"from-host").decode()}
    resp = sandbox_fusion.run_jupyter(
        RunJupyterRequest(
            cells=[*EXAMPLE, "open('out.txt', 'w').write(open('data.txt').read() + '!')"],
            files=files,
            fetch_files=["out.txt"],
        )
    )
    assert resp.status == RunStatus.Success, resp
    assert resp.driver is not None and resp.driver.status.value == "Finished"
    cells = resp.cells
    assert len(cells) == 6
    assert cells[0].display == [] and cells[0].error == []
    assert cells[1].display == [{"text/plain": "123"}]
    assert cells[2].stdout == "123\n"
    assert cells[3].stderr == "stderr message" and cells[3].display == [{"text/plain": "14"}]
    (error,) = cells[4].error
    assert error["ename"] == "RuntimeError" and error["evalue"] == "error message"
    assert error["traceback"][0] == "Traceback (most recent call last):" and error["traceback"][-1].startswith(
        "RuntimeError"
    )
    assert base64.b64decode(resp.files["out.txt"]) == b"from-host!"
    # A request's cells share a kernel; the next request starts from nothing (Sandbox Fusion's rule).
    again = sandbox_fusion.run_jupyter(RunJupyterRequest(cells=["'a' in dir()"]))
    assert again.cells[0].display == [{"text/plain": "False"}]


async def test_sandbox_fusion_async_client_run_jupyter(endpoint: str) -> None:
    resp = await sandbox_fusion.run_jupyter_async(RunJupyterRequest(cells=["b = [1, 2]", "sum(b)"]))
    assert resp.status == RunStatus.Success and resp.cells[1].display == [{"text/plain": "3"}]


def test_sandbox_fusion_client_total_timeout(endpoint: str) -> None:
    resp = sandbox_fusion.run_jupyter(RunJupyterRequest(cells=["x = 1", "while True: pass"], total_timeout=1))
    assert resp.status == RunStatus.Failed and resp.cells == []
    assert resp.driver is not None and resp.driver.status.value == "TimeLimitExceeded"


async def test_session_id_keeps_the_kernel(app_client: AppClient) -> None:
    async with app_client("subprocess", max_sessions=2) as client:
        opened = await client.post("/run_jupyter/sessions")
        assert opened.status_code == 201 and opened.json()["kernel_ttl_s"] == 600, opened.text
        sid = {"session_id": opened.json()["session_id"]}
        first = await client.post("/run_jupyter", json={"cells": ["def f(x):\n    return x + 1", "seen = []"], **sid})
        assert first.status_code == 200 and first.json()["status"] == "Success", first.text
        second = (await client.post("/run_jupyter", json={"cells": ["seen.append(f(1))", "seen"], **sid})).json()
        assert second["cells"][1]["display"] == [{"text/plain": "[2]"}] and second["session_id"] == sid["session_id"]
        assert not second["state_lost"]
        other = {"session_id": (await client.post("/run_jupyter/sessions")).json()["session_id"]}
        third = (await client.post("/run_jupyter", json={"cells": ["'seen' in dir()"], **other})).json()
        assert third["cells"][0]["display"] == [{"text/plain": "False"}]
        stats = (await client.get("/v1/stats")).json()["sessions"]
        assert stats == {"live": 2, "busy": 0, "max_sessions": 2, "ttl_s": 600.0}
        # A request without an id still runs, in a kernel of its own, however many sessions are kept.
        assert (await client.post("/run_jupyter", json={"cells": ["1"]})).json()["status"] == "Success"
        # Idle past the TTL: closed (the clock is moved, not slept on).
        kernels = client.app.state.kernels  # type: ignore[attr-defined]
        for kept in kernels._kept.values():
            kept.last_used -= kernels.ttl_s + 1
        assert await kernels.expire() == 2 and len(kernels) == 0


async def test_cell_timeout_is_one_cells_error(app_client: AppClient) -> None:
    async with app_client("subprocess") as client:
        body = {"cells": ["a = 1", "while True:\n    pass", "'a' in dir()"], "cell_timeout": 0.5, "total_timeout": 20}
        resp = (await client.post("/run_jupyter", json=body)).json()
        assert resp["status"] == "Success", resp
        (error,) = resp["cells"][1]["error"]
        assert error["ename"] == "TimeoutError" and resp["cells"][1]["state_lost"]
        assert resp["cells"][2]["display"] == [{"text/plain": "False"}] and resp["cells"][2]["restarted"]


async def test_bad_jupyter_requests_are_422(app_client: AppClient) -> None:
    async with app_client("subprocess") as client:
        for body in (
            {"cells": ["1"], "files": {"../x": ""}},
            {"cells": ["1"], "files": {"a.txt": "not base64!"}},
            {"cells": ["1"], "fetch_files": ["/etc/passwd"]},
            {"cells": "1"},
            {"cells": ["1"], "kernel": "julia"},
        ):
            response = await client.post("/run_jupyter", json=body)
            assert response.status_code == 422, (body, response.text)


def test_ipython_cells_answer_as_sandbox_fusion(endpoint: str) -> None:
    """display(), %time, !echo, a trailing ; and top-level await: the shapes Sandbox Fusion's ipykernel returns."""
    resp = sandbox_fusion.run_jupyter(
        RunJupyterRequest(
            cells=[
                "from IPython.display import display, HTML\ndisplay(HTML('<b>bold</b>'))\n6 * 7",
                "%time x = sum(range(10))",
                "!echo from-shell",
                "x;",
                "import asyncio\nawait asyncio.sleep(0)\nx",
                "display({'image/png': b'\\x89PNG', 'text/plain': '<Figure>'}, raw=True)",
            ]
        )
    )
    assert resp.status == RunStatus.Success, resp
    shown, timed, shell, silenced, awaited, image = resp.cells
    assert shown.display == [
        {"text/plain": "<IPython.core.display.HTML object>", "text/html": "<b>bold</b>"},
        {"text/plain": "42"},
    ]
    assert "Wall time: " in timed.stdout and timed.display == [] and timed.error == []
    assert shell.stdout == "from-shell\n" and shell.display == [] and shell.error == []
    assert silenced.display == [] and silenced.stdout == "" and silenced.error == []
    assert awaited.display == [{"text/plain": "45"}] and awaited.error == []
    assert image.display == [{"image/png": "iVBORw==", "text/plain": "<Figure>"}]
