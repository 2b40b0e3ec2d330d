"""The conformance suite on the subprocess backend (no expected failures: issue 20 and 18.2 are fixed here)."""

from __future__ import annotations

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance


class TestSubprocessConformance(BackendConformance):
    backend_name = "subprocess"

    async def live_sandboxes(self, backend: Backend) -> int | None:
        assert isinstance(backend, SubprocessBackend)
        return backend.live_sandboxes
