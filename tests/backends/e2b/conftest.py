"""Fixtures of the E2B backend tests: a loopback fake E2B (API + envd) per test, backends pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fakes.e2b_fake import FakeE2B
from sandboxkit.backends.e2b import E2BBackend


@pytest.fixture
def fake() -> Iterator[FakeE2B]:
    with FakeE2B() as service:
        yield service


@pytest.fixture
async def make_backend(fake: FakeE2B) -> AsyncIterator[Callable[..., E2BBackend]]:
    made: list[E2BBackend] = []

    def make(**options: Any) -> E2BBackend:
        options = {"api_key": fake.api_key, "api_url": fake.url, "sandbox_url": fake.url, "grace_s": 5.0, **options}
        backend = E2BBackend(**options)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.aclose()


@pytest.fixture
def service_env(fake: FakeE2B, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment that points the e2b backend (in this process or a child) at the fake."""
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    return {"E2B_API_KEY": fake.api_key, "E2B_API_URL": fake.url, "E2B_SANDBOX_URL": fake.url}
