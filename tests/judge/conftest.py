"""Fixtures for the judge tests: a real subprocess-backed pool, a recording wrapper, a broken backend."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit import SandboxPool
from support.judge import FAST, BrokenBackend, RecordingBackend, codec_namespace, pool_over
from support.marks import missing


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


def docker_usable() -> bool:
    """Whether the Docker backend can start sandboxes here (its engine answers and its image exists)."""
    try:
        from sandboxkit.backends.docker import DockerBackend
    except Exception:
        return False
    return bool(DockerBackend.availability().usable)


@pytest.fixture
async def docker_pool() -> AsyncIterator[SandboxPool]:
    """A pool on the Docker backend (skipped where it is not usable, a failure under CI=true)."""
    if not docker_usable():
        missing("the docker backend is not usable here")
    from sandboxkit.backends.docker import DockerBackend

    async with pool_over(DockerBackend(labels={"sandboxkit.test": uuid.uuid4().hex}), 2) as p:
        yield p
