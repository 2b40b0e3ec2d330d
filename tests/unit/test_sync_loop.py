"""The private loop of ``SyncSandboxPool`` and the trainer adapters (issue 30: host CPU per run).

That loop belongs to sandboxkit alone, so it may be uvloop's, which costs the host about a fifth
less CPU per pooled run than asyncio's. ``SANDBOXKIT_LOOP=asyncio`` keeps asyncio's.
"""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from sandboxkit import SyncSandboxPool
from sandboxkit.sync import EventLoopThread
from support.marks import missing


def test_the_private_loop_is_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("uvloop") is None:
        missing("uvloop is not installed (the server extra)")
    import uvloop

    monkeypatch.delenv("SANDBOXKIT_LOOP", raising=False)
    thread = EventLoopThread()
    try:
        assert isinstance(thread.loop, uvloop.Loop)
    finally:
        thread.stop()


def test_sandboxkit_loop_asyncio_keeps_asyncio_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXKIT_LOOP", "asyncio")
    thread = EventLoopThread()
    try:
        assert isinstance(thread.loop, asyncio.SelectorEventLoop)
    finally:
        thread.stop()


def test_a_sync_pool_runs_on_its_private_loop() -> None:
    with SyncSandboxPool("subprocess", max_concurrency=2) as pool:
        assert pool.run("print(6 * 7)").stdout == "42\n"
