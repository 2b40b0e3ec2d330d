"""The local limiter's call slot on the pool's hot path (issue 30: host CPU per run).

Every pooled run takes one call slot. A free slot must be taken without a round of the event
loop: anyio's ``acquire_on_behalf_of`` sleeps once even when a token is free, which costs each
run one more wake-up of the host process. A slot that is not free still queues in order.
"""

from __future__ import annotations

import asyncio

from sandboxkit.limiter import LocalLimiter


async def test_a_free_call_slot_is_taken_without_yielding_to_the_loop() -> None:
    limiter = LocalLimiter(2)
    others_ran: list[str] = []
    asyncio.get_running_loop().call_soon(others_ran.append, "other")
    await limiter.acquire_call("a")
    assert others_ran == []
    assert limiter.statistics().calls_in_flight == 1
    limiter.release_call("a")


async def test_a_full_limiter_still_queues_callers_in_order() -> None:
    limiter = LocalLimiter(1)
    await limiter.acquire_call("first")
    order: list[str] = []

    async def take(token: str) -> None:
        await limiter.acquire_call(token)
        order.append(token)

    waiters = [asyncio.create_task(take(t)) for t in ("second", "third")]
    await asyncio.sleep(0)
    assert limiter.statistics().calls_waiting == 2
    limiter.release_call("first")
    await asyncio.sleep(0)
    limiter.release_call(order[0])
    await asyncio.gather(*waiters)
    assert order == ["second", "third"]
