"""``Limiter`` (``sandboxkit.limiter``): a custom limiter is used as it says, never probed."""

from __future__ import annotations

import pytest

from sandboxkit import (
    InvalidRequest,
    RateLimited,
    SandboxPool,
    Status,
)
from sandboxkit.testing import FakeBackend


async def test_a_custom_limiter_states_what_it_does_instead_of_being_probed() -> None:
    from sandboxkit.limiter import Limiter, LocalLimiter

    class Counting(LocalLimiter):
        """A limiter that inherits the protocol's defaults and records the pool's notifications."""

        def __init__(self) -> None:
            super().__init__(4, 4, creation_rate=100)
            self.penalties: list[float] = []
            self.attached = 0

        def penalize_creation(self, seconds: float) -> None:
            self.penalties.append(seconds)
            super().penalize_creation(seconds)

        def attach(self, on_capacity: object, reclaim_idle: object) -> None:
            self.attached += 1

    limiter = Counting()
    backend = FakeBackend(open_failures=1, open_error=lambda msg: RateLimited(msg, retry_after=0.05))  # type: ignore[arg-type]
    async with SandboxPool(backend, limiter=limiter, retries=2, backoff_base_s=0.0001) as pool:
        assert (await pool.run("ok")).status is Status.OK
    assert limiter.attached == 1
    assert limiter.penalties == [0.05], "a 429 on creation reaches the limiter once, with Retry-After"

    class Bare(Limiter):  # only the required methods: the notifications fall back to the no-op defaults
        def __init__(self) -> None:
            self.inner = LocalLimiter(2, 2)

        async def acquire_call(self, token: object) -> None:
            await self.inner.acquire_call(token)

        def release_call(self, token: object) -> None:
            self.inner.release_call(token)

        async def try_acquire_sandbox(self, token: object) -> bool:
            return await self.inner.try_acquire_sandbox(token)

        def release_sandbox(self, token: object) -> None:
            self.inner.release_sandbox(token)

        async def creation_token(self) -> None:
            await self.inner.creation_token()

        def statistics(self):  # type: ignore[no-untyped-def]
            return self.inner.statistics()

        async def aclose(self) -> None:
            await self.inner.aclose()

    ratelimited = FakeBackend(open_failures=1, open_error=lambda msg: RateLimited(msg, retry_after=0.01))  # type: ignore[arg-type]
    async with SandboxPool(ratelimited, limiter=Bare(), retries=2, backoff_base_s=0.0001) as pool:
        assert (await pool.run("ok")).status is Status.OK
    with pytest.raises(InvalidRequest, match=r"limiter must be .*Limiter.*got <object"):
        SandboxPool(FakeBackend(), limiter=object())  # type: ignore[arg-type]
