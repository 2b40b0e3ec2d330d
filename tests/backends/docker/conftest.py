"""Fixtures of the Docker backend tests: a real engine, per-test labels, and a leak check on teardown.

Every test here (but the engine-free protocol tests) is marked ``docker``. Without an engine (or the image) they skip locally and
run, to fail loudly, under ``CI=true``. Each test labels its containers with a fresh
``sandboxkit.test=<uuid>``, so counting and cleaning never touch anyone else's containers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.docker_engine import FAST, TEST_LABEL, engine_status, leftovers

HERE = Path(__file__).parent
#: Modules that test the protocol without an engine: they run everywhere.
ENGINE_FREE = {"test_docker_protocol.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in Path(str(item.path)).parents or Path(str(item.path)).name in ENGINE_FREE:
            continue
        item.add_marker(pytest.mark.docker)
        usable, why = engine_status()
        if not usable and os.environ.get("CI") != "true":
            item.add_marker(pytest.mark.skip(reason=f"{why} (CI=true turns this skip into a failure)"))


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    import docker

    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def test_labels() -> dict[str, str]:
    return {TEST_LABEL: uuid.uuid4().hex}


@pytest.fixture
async def backend(test_labels: dict[str, str], docker_client: Any) -> AsyncIterator[Any]:
    """A DockerBackend whose containers carry this test's label; fails the test if any is left behind."""
    from sandboxkit.backends.docker import DockerBackend

    b = DockerBackend(labels=test_labels)
    try:
        yield b
    finally:
        await b.aclose()
        assert leftovers(docker_client, test_labels) == (0, 0), "the test left containers or volumes behind"


@pytest.fixture
async def sandbox(backend: Any) -> AsyncIterator[Any]:
    sb = await backend.open(FAST)
    try:
        yield sb
    finally:
        await sb.close()
