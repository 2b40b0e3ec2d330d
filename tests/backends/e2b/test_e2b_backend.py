"""The e2b backend against a loopback fake E2B (control plane + envd), through the real ``e2b`` SDK.

The shared behaviour (streams, limits, 429 / 5xx / timeouts / vanished sandboxes, caps,
SIGINT, clean-up) is in ``tests/fakes/cloud_tests.py``; this module adds what is E2B's own.
"""

from __future__ import annotations

from typing import Any

from fakes.cloud_tests import CloudBackendBehaviour
from fakes.e2b_fake import FakeE2B
from sandboxkit.errors import RateLimited


class TestE2BBackend(CloudBackendBehaviour):
    key_env = "E2B_API_KEY"
    backend_name = "e2b"

    def assert_backstops(self, create_body: dict[str, Any]) -> None:
        assert create_body["allow_internet_access"] is False
        assert (
            create_body["timeout"] == 40
        )  # it dies on its own one TTL (default limits: 10 s + 30 s) after its last renewal

    def pointed_at(self, url: str) -> dict[str, str]:
        return {"api_url": url, "sandbox_url": url}

    def assert_retry_after(self, err: RateLimited) -> None:
        assert err.retry_after is None  # the e2b SDK drops the header; the pool's backoff applies

    def assert_command_was_killed(self, fake: Any, sandbox_id: str) -> None:
        assert isinstance(fake, FakeE2B)
        assert [s for s in fake.signals if s[0] == sandbox_id and s[2] == 9], "no SIGKILL was sent for the command"
        assert any("kill -KILL" in c for c in fake.commands), "the process group was not killed"
