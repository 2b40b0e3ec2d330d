"""Fixtures of the Daytona backend tests: a loopback fake Daytona per test, backends pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fakes.daytona_fake import FakeDaytona
from sandboxkit.backends.daytona import DaytonaBackend


@pytest.fixture
def fake() -> Iterator[FakeDaytona]:
    with FakeDaytona() as service:
        yield service


@pytest.fixture
async def make_backend(fake: FakeDaytona) -> AsyncIterator[Callable[..., DaytonaBackend]]:
    made: list[DaytonaBackend] = []

    def make(**options: Any) -> DaytonaBackend:
        options = {"api_key": fake.api_key, "api_url": fake.api_url, "grace_s": 5.0, **options}
        backend = DaytonaBackend(**options)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.aclose()


@pytest.fixture
def service_env(fake: FakeDaytona, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment that points the daytona backend (in this process or a child) at the fake."""
    monkeypatch.delenv("DAYTONA_TARGET", raising=False)
    return {"DAYTONA_API_KEY": fake.api_key, "DAYTONA_API_URL": fake.api_url}
