"""Fixtures for the judge tests: a real subprocess-backed pool, a recording wrapper, a broken backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit import SandboxPool
from support.judge import FAST, BrokenBackend, RecordingBackend, codec_namespace, pool_over


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with SandboxPool("subprocess", max_concurrency=4, limits=FAST) as p:
        yield p


@pytest.fixture
async def recording() -> AsyncIterator[tuple[SandboxPool, RecordingBackend]]:
    backend = RecordingBackend()
    async with pool_over(backend, 4) as p:
        yield p, backend


@pytest.fixture
async def broken_pool() -> AsyncIterator[SandboxPool]:
    async with SandboxPool(BrokenBackend(), max_concurrency=2, retries=0) as p:
        yield p


@pytest.fixture(scope="module")
def codec() -> dict[str, Any]:
    """The isolated harness's value codec (``support.judge.codec_roundtrip`` sends values through it)."""
    return codec_namespace()
