"""One sandbox on each local command backend (subprocess, Docker), for tests that run the same rows on both."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit.base import Sandbox
from sandboxkit.models import Limits
from sandboxkit.registry import backend as make_backend
from support.docker_engine import engine_status
from support.marks import missing

#: The parameters of a module-scoped ``sandbox`` fixture: Docker's rows carry the ``docker`` mark.
LOCAL_BACKENDS = [pytest.param("subprocess"), pytest.param("docker", marks=pytest.mark.docker)]


async def local_sandbox(kind: str, limits: Limits) -> AsyncIterator[Sandbox]:
    """Open a sandbox on ``kind`` for the fixture's lifetime; an unusable engine skips (fails under CI=true)."""
    options: dict[str, Any] = {}
    if kind == "docker":
        usable, why = engine_status()
        if not usable:
            missing(f"docker backend unusable: {why}")
        options["labels"] = {"sandboxkit.test": uuid.uuid4().hex}  # the leak checks find what a test left
    backend = make_backend(kind, **options)
    sandbox = await backend.open(limits)
    try:
        yield sandbox
    finally:
        await sandbox.close()
        await backend.aclose()
