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


@pytest.fixture(scope="session")
def sk_serve() -> Iterator[ServeProcess]:
    """One ``sandboxkit serve --backend subprocess`` for the session, on a free loopback port."""
    server = ServeProcess("--backend", "subprocess", "--max-concurrency", "8")
    with server:
        yield server
    assert not server.leftover, "sandboxkit serve left processes behind after SIGTERM"
