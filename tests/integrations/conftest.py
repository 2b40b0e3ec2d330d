"""Fixtures for the trainer-adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxkit.integrations._runtime import close_shared_handles
from support.integrations import DownBackend


@pytest.fixture
def down_backend() -> DownBackend:
    return DownBackend()


@pytest.fixture(autouse=True)
def _close_shared_pools() -> Iterator[None]:
    """Adapters share process-wide pools; close them after each test so nothing leaks between tests."""
    yield
    close_shared_handles()
