"""Fixtures: the app in-process (httpx.ASGITransport) and ``sandboxkit serve`` as a real subprocess."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from sandboxkit.server.app import create_app
from support.serve import AppClient, ServeProcess


@pytest.fixture
def app_client() -> AppClient:
    """``async with app_client(backend, **create_app_kwargs) as client:`` -- lifespan included."""

    @asynccontextmanager
    async def make(backend: Any = "subprocess", **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
        app = create_app(backend, **kwargs)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sandboxkit.test", timeout=60) as c:
                c.app = app  # type: ignore[attr-defined]
                yield c

    return make


@pytest.fixture(scope="session", params=[1, 2], ids=["1-worker", "2-workers"])
def sk_serve(request: pytest.FixtureRequest) -> Iterator[ServeProcess]:
    """``sandboxkit serve --backend subprocess`` on a free loopback port: one process, then two workers.

    Every real client's test runs against both, so a client that breaks when another process
    answers its next request (a kept session, a retry) fails here.
    """
    server = ServeProcess("--backend", "subprocess", "--max-concurrency", "8", "--workers", str(request.param))
    with server:
        yield server
    assert not server.leftover, "sandboxkit serve left processes behind after SIGTERM"
