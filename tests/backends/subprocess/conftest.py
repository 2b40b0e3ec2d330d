"""Fixtures of the subprocess backend tests (helpers live in ``support.subprocess_sandboxes``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from sandboxkit.backends.subprocess import SubprocessSandbox
from sandboxkit.pool import SandboxPool
from support.subprocess_sandboxes import FAST, RecordingBackend, processes_of


@pytest.fixture
async def backend() -> AsyncIterator[RecordingBackend]:
    b = RecordingBackend()
    try:
        yield b
    finally:
        await b.aclose()
        uids = {sb.uid for sb in b.opened if sb.uid is not None}
        # SIGKILLed processes take a moment to finish exiting; survivors are what remains after that.
        deadline = time.monotonic() + 2.0
        while processes_of(uids) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert processes_of(uids) == {}, "processes survived closing their sandboxes"


@pytest.fixture
async def sandbox(backend: RecordingBackend) -> AsyncIterator[SubprocessSandbox]:
    sb = await backend.open(FAST)
    try:
        yield sb
    finally:
        await sb.close()


@pytest.fixture
async def pool(backend: RecordingBackend) -> AsyncIterator[SandboxPool]:
    async with SandboxPool(backend, max_concurrency=2, limits=FAST) as p:
        await p.run("pass")  # start one fork server now, so timing bounds measure the program alone
        yield p
