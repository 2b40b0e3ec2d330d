"""E2B's timeout as the dead-man switch: renewed while the owner lives, the service's to apply once it dies."""

from __future__ import annotations

import time

from fakes._common import wait_until
from fakes.e2b_fake import FakeE2B
from fakes.ttl_tests import SESSIONS, kill, owner

#: The child's pool deadline, so its sandboxes' E2B timeout (seconds).
TTL_S = 6.0


def test_sigkilled_owner_leaves_no_sandbox_after_the_ttl(fake: FakeE2B, service_env: dict[str, str]) -> None:
    with owner("e2b", service_env, TTL_S) as child:
        ids = set(fake.live_ids())
        assert len(ids) == SESSIONS
        assert {fake.box(i).data["timeout"] for i in ids} == {int(TTL_S)}, "the timeout is the pool's TTL"
        time.sleep(2.5 * TTL_S)  # no call runs: only the owner's renewals keep them alive
        assert set(fake.live_ids()) == ids and fake.ledger.expired == []
        kill(child)
        killed_at = time.monotonic()
        assert fake.live_count == SESSIONS
        assert wait_until(lambda: fake.live_count == 0, TTL_S + 5.0), f"{fake.live_count} sandboxes outlived the TTL"
        assert time.monotonic() - killed_at >= TTL_S / 3  # the last renewal was at most a third of a TTL ago
    assert set(fake.ledger.expired) == ids and fake.running_processes() == []
