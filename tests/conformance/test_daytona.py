"""The conformance suite on the daytona backend, against the loopback fake Daytona (real SDK, real HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.daytona_fake import FakeDaytona
from sandboxkit.backends.daytona import DaytonaBackend
from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance


@pytest.fixture(scope="module")
def daytona_fake() -> Iterator[FakeDaytona]:
    with FakeDaytona() as fake:
        yield fake


class TestDaytonaConformance(BackendConformance):
    backend_name = "daytona"
    # The loopback fake runs programs unsandboxed on this machine: the attack tests skip.
    contained = False
    fake: FakeDaytona

    @pytest.fixture(autouse=True)
    def _use_fake(self, daytona_fake: FakeDaytona) -> None:
        type(self).fake = daytona_fake

    async def create_backend(self) -> Backend:
        return DaytonaBackend(api_key=self.fake.api_key, api_url=self.fake.api_url, grace_s=3.0)

    async def live_sandboxes(self, backend: Backend) -> int | None:
        return self.fake.live_count
