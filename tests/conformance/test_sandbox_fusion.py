"""The conformance suite on the ``sandbox_fusion`` backend, pointed at a real ``sandboxkit serve``.

The chain under test: this backend -> HTTP -> ``sandboxkit serve --backend subprocess`` -> the
subprocess backend. The stateful tests skip themselves (the backend declares ``stateful=False``);
the xfails below are what Sandbox Fusion's ``/run_code`` protocol cannot express.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from sandboxkit.backends.sandbox_fusion import SandboxFusionBackend
from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance
from support.serve import ServeProcess


@pytest.fixture(scope="module")
def serve_url() -> Iterator[str]:
    server = ServeProcess("--backend", "subprocess", "--max-concurrency", "8")
    with server:
        yield server.url
    assert not server.leftover


class TestSandboxFusionConformance(BackendConformance):
    backend_name = "sandbox_fusion"
    xfail: ClassVar[dict[str, str]] = {
        "test_request_env_is_visible": (
            "Sandbox Fusion's RunCodeRequest has no env field; the backend refuses env rather than dropping it"
        ),
    }

    @pytest.fixture(autouse=True)
    def _point_at_server(self, serve_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SANDBOX_FUSION_URL", serve_url)

    async def live_sandboxes(self, backend: Backend) -> int | None:
        assert isinstance(backend, SandboxFusionBackend)
        return backend.live_sandboxes
