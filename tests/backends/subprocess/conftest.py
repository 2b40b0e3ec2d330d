"""Fixtures of the subprocess backend tests: one backend per test, leak checks on the host."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend, SubprocessSandbox
from sandboxkit.models import Limits

FAST = Limits(timeout_s=5.0, compile_timeout_s=60.0, output_bytes=1 << 20)


@pytest.fixture
async def backend() -> AsyncIterator[SubprocessBackend]:
    b = SubprocessBackend()
    try:
        yield b
    finally:
        await b.aclose()


@pytest.fixture
async def sandbox(backend: SubprocessBackend) -> AsyncIterator[SubprocessSandbox]:
    sb = await backend.open(FAST)
    try:
        yield sb
    finally:
        await sb.close()
