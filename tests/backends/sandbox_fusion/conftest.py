"""A real ``sandboxkit serve --backend subprocess`` for the client backend's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.serve import ServeProcess


@pytest.fixture(scope="session")
def sf_serve() -> Iterator[ServeProcess]:
    server = ServeProcess("--backend", "subprocess", "--max-concurrency", "8")
    with server:
        yield server
    assert not server.leftover, "sandboxkit serve left processes behind after SIGTERM"
