"""The conformance suite on the subprocess backend with an image root filesystem (the base image, exported).

Every sandbox runs on its own overlay of the image, with the image's python3 as the fork
server. Skips without root (overlays) or without Docker to export the image from.
"""

from __future__ import annotations

import os

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance
from support.marks import missing
from support.rootfs import CACHE, base_image_tarball

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="rootfs sandboxes mount an overlay per sandbox: root only")


class TestSubprocessRootfsConformance(BackendConformance):
    backend_name = "subprocess"

    async def create_backend(self) -> Backend:
        tarball = base_image_tarball()
        if tarball is None:
            missing("no Docker engine or sandboxkit-base image to export (scripts/docker-setup.sh)")
        return SubprocessBackend(rootfs=tarball, rootfs_cache=CACHE)

    async def live_sandboxes(self, backend: Backend) -> int | None:
        assert isinstance(backend, SubprocessBackend)
        return backend.live_sandboxes
