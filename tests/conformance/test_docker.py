"""The conformance suite on the Docker backend (a real engine and the sandboxkit-base image).

Skips locally without an engine; under ``CI=true`` it runs and fails instead.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, ClassVar

import pytest

from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance


def _docker_usable() -> tuple[bool, str]:
    try:
        from sandboxkit.backends.docker import DockerBackend
    except ImportError as exc:
        return False, str(exc)
    availability = DockerBackend.availability()
    return availability.usable, availability.reason


_USABLE, _WHY = _docker_usable()
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not _USABLE and os.environ.get("CI") != "true", reason=f"{_WHY} (CI=true turns this skip into a failure)"
    ),
]
#: This module's containers carry their own label, so counting them ignores everyone else's.
_LABELS = {"sandboxkit.test": f"conformance-{uuid.uuid4().hex[:8]}"}


class TestDockerConformance(BackendConformance):
    backend_name = "docker"
    backend_options: ClassVar[dict[str, Any]] = {"labels": _LABELS}

    async def live_sandboxes(self, backend: Backend) -> int | None:
        import docker

        client = docker.from_env()
        try:
            filters = {"label": [f"{k}={v}" for k, v in _LABELS.items()]}
            return len(client.api.containers(all=True, filters=filters))
        finally:
            client.close()
