"""Daytona's auto-stop as the dead-man switch: renewed while the owner lives, the service's to apply once it dies.

Daytona counts auto-stop in whole minutes, so this test waits a real minute after the kill.
"""

from __future__ import annotations

from fakes._common import wait_until
from fakes.daytona_fake import FakeDaytona
from fakes.ttl_tests import SESSIONS, kill, owner

#: The child's pool deadline: its TTL, one minute in Daytona's unit.
TTL_S = 3.0


def test_sigkilled_owner_leaves_no_sandbox_after_the_ttl(fake: FakeDaytona, service_env: dict[str, str]) -> None:
    with owner("daytona", service_env, TTL_S) as child:
        ids = set(fake.live_ids())
        assert len(ids) == SESSIONS
        assert {fake.box(i).data["autoStopInterval"] for i in ids} == {1}, "the TTL in whole minutes"
        assert {fake.box(i).data["autoDeleteInterval"] for i in ids} == {0}, "ephemeral: a stop deletes it"
        assert wait_until(lambda: ids <= set(fake.activities), 30.0), "the owner renews every sandbox it holds"
        kill(child)
        assert fake.live_count == SESSIONS
        assert wait_until(lambda: fake.live_count == 0, 60.0 + 10.0), f"{fake.live_count} sandboxes outlived the TTL"
    assert set(fake.ledger.expired) == ids and fake.running_processes() == []
