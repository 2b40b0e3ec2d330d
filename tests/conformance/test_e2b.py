"""The conformance suite on the e2b backend, against the loopback fake E2B (real SDK, real HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.e2b_fake import FakeE2B
from sandboxkit.backends.e2b import E2BBackend
from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance


@pytest.fixture(scope="module")
def e2b_fake() -> Iterator[FakeE2B]:
    with FakeE2B() as fake:
        yield fake


class TestE2BConformance(BackendConformance):
    backend_name = "e2b"
    # The loopback fake runs programs unsandboxed on this machine: the attack tests skip.
    contained = False
    fake: FakeE2B

    @pytest.fixture(autouse=True)
    def _use_fake(self, e2b_fake: FakeE2B) -> None:
        type(self).fake = e2b_fake

    async def create_backend(self) -> Backend:
        return E2BBackend(api_key=self.fake.api_key, api_url=self.fake.url, sandbox_url=self.fake.url, grace_s=3.0)

    async def live_sandboxes(self, backend: Backend) -> int | None:
        return self.fake.live_count
