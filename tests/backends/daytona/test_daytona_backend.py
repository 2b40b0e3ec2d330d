"""The daytona backend against a loopback fake Daytona, through the real ``daytona`` SDK.

The shared behaviour (streams, limits, 429 / 5xx / timeouts / vanished sandboxes, caps,
SIGINT, clean-up) is in ``tests/fakes/cloud_tests.py``; this module adds what is Daytona's own.
"""

from __future__ import annotations

from typing import Any

from fakes.cloud_tests import CloudBackendBehaviour
from fakes.daytona_fake import FakeDaytona
from sandboxkit.errors import RateLimited


class TestDaytonaBackend(CloudBackendBehaviour):
    key_env = "DAYTONA_API_KEY"
    backend_name = "daytona"

    def assert_backstops(self, create_body: dict[str, Any]) -> None:
        assert create_body["networkBlockAll"] is True
        assert create_body["autoStopInterval"] == 1  # unrenewed sandboxes stop (the default TTL, 40 s, in minutes)...
        assert create_body["autoDeleteInterval"] == 0  # ...and, being ephemeral, are deleted
        assert create_body["public"] is False

    def pointed_at(self, url: str) -> dict[str, str]:
        return {"api_url": url + "/api"}

    def assert_retry_after(self, err: RateLimited) -> None:
        assert err.retry_after == 0.05

    def assert_command_was_killed(self, fake: Any, sandbox_id: str) -> None:
        assert isinstance(fake, FakeDaytona)
        assert [s for s in fake.session_deletes if s[0] == sandbox_id], "the stuck session was not deleted"
        assert any("kill -KILL" in c for c in fake.commands), "the process group was not killed"
