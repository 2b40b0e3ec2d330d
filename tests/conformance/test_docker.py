"""The conformance suite on the Docker backend (a real engine), on three images and both runners.

* ``sandboxkit-base`` (the project's image, full Python): the runner ``auto`` picks (the Python
  runner), and the static Go runner;
* ``sandboxkit-busybox`` (only a static busybox: no libc, no bash, no Python) and
  ``sandboxkit-nopython`` (Debian minbase, bash but no Python), built by
  ``scripts/docker-test-images.sh``: ``auto`` falls back to the static runner there. A test whose
  program needs a language the image lacks skips with the backend's ToolchainMissing message
  (see conftest.py); everything else must pass.

Skips locally without an engine (or an image); under ``CI=true`` it runs and fails instead.
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


def _image_present(image: str) -> bool:
    try:
        import docker
        import docker.errors

        client = docker.from_env()
    except Exception:
        return False
    try:
        client.images.get(image)
        return True
    except docker.errors.DockerException:
        return False
    finally:
        client.close()


_USABLE, _WHY = _docker_usable()
BUSYBOX_IMAGE = "sandboxkit-busybox:latest"
NOPYTHON_IMAGE = "sandboxkit-nopython:latest"


def _needs_image(image: str) -> pytest.MarkDecorator:
    present = _USABLE and _image_present(image)
    return pytest.mark.skipif(
        not present and os.environ.get("CI") != "true",
        reason=f"image {image} is missing: build it with scripts/docker-test-images.sh (CI=true fails instead)",
    )


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


class TestDockerStaticRunnerConformance(TestDockerConformance):
    """The base image with the static Go runner instead of the Python one."""

    backend_options: ClassVar[dict[str, Any]] = {"labels": _LABELS, "runner": "static"}

    @pytest.fixture(autouse=True)
    def _static_runner(self) -> None:
        from support.docker_engine import require_static_runner

        require_static_runner()


#: Tests that call python3 without going through a language (so no ToolchainMissing): they fail there.
_NO_PYTHON = {
    "test_exec_shell_and_argv": "exec of python3 in an image without it exits 127 (command not found)",
    "test_pool_run_many_in_order": "run_many returns each ToolchainMissing as a result instead of raising it",
}


@_needs_image(BUSYBOX_IMAGE)
class TestDockerBusyboxConformance(TestDockerConformance):
    """An image holding only a static busybox: the runner must need nothing from it.

    Most of the suite's programs are Python and skip here; tests/backends/docker/test_docker_images.py
    checks the same contract with shell programs on both small images.
    """

    backend_options: ClassVar[dict[str, Any]] = {"labels": _LABELS, "image": BUSYBOX_IMAGE}
    skip_missing_toolchains = True
    xfail: ClassVar[dict[str, str]] = _NO_PYTHON


@_needs_image(NOPYTHON_IMAGE)
class TestDockerNoPythonConformance(TestDockerConformance):
    """Debian minbase without Python (bash and coreutils only)."""

    backend_options: ClassVar[dict[str, Any]] = {"labels": _LABELS, "image": NOPYTHON_IMAGE}
    skip_missing_toolchains = True
    xfail: ClassVar[dict[str, str]] = _NO_PYTHON
