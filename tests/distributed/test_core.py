"""The lease book of the limiter actor, without Ray: caps, FIFO grants, cancels, expiry, the bucket."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from sandboxkit.distributed._core import LimiterConfig, LimiterCore
from sandboxkit.limiter import LocalLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(max_calls: int = 2, **kw: object) -> tuple[LimiterCore, Clock, list[str]]:
    clock = Clock()
    woken: list[str] = []
    core = LimiterCore(LimiterConfig(max_calls, **kw), clock=clock, wake=woken.append)  # type: ignore[arg-type]
    return core, clock, woken


def test_grants_never_exceed_the_cap_and_follow_arrival_order_across_owners() -> None:
    core, _, _ = make(max_calls=2)
    assert core.post("a", requests=["a1", "a2", "a3"])["granted"] == ["a1", "a2"]
    assert core.post("b", requests=["b1"])["granted"] == []
    core.post("c", requests=["c1"])
    core.post("a", requests=["a4"])
    assert core.calls_used == 2
    # Each release grants the oldest waiting request, whoever asked: a3, b1, c1, a4.
    order: list[str] = []
    holders = ["a", "a"]
    for _ in range(4):
        releasing = holders.pop(0)
        granted = core.post(releasing, releases=1)["granted"]
        for owner in "abc":
            granted += core.reply(owner)["granted"] if owner != releasing else []
        order += granted
        holders += [g[0] for g in granted]
        assert core.calls_used == 2
    assert order == ["a3", "b1", "c1", "a4"]


def test_a_free_slot_goes_first_to_an_owner_below_its_fair_share() -> None:
    core, _, woken = make(max_calls=4)
    assert core.post("a", requests=["a1", "a2", "a3", "a4", "a5"])["granted"] == ["a1", "a2", "a3", "a4"]
    woken.clear()
    core.post("b", requests=["b1"])
    assert "a" in woken  # a holds 4 and was told it could: it must learn its share is now 2
    assert core.reply("a")["keep"] == 2  # its share; b waits below its own share
    core.post("a", releases=1)
    assert core.reply("b")["granted"] == ["b1"]  # b (0 of its 2) before a's older a5 (a holds 3)
    assert core.post("a", releases=1)["granted"] == ["a5"]


def test_a_request_that_backs_off_keeps_its_place() -> None:
    core, _, _ = make(max_calls=1)
    core.post("busy", requests=["x1"])
    core.post("slow", requests=["s1"])  # queued, then the caller backs off for a while
    for i in range(2, 6):  # the busy owner keeps asking
        core.post("busy", requests=[f"x{i}"])
    core.post("busy", releases=1)
    assert core.reply("slow")["granted"] == ["s1"]


def test_cancel_removes_a_queued_request_and_undoes_an_undelivered_grant() -> None:
    core, _, _ = make(max_calls=1)
    core.post("a", requests=["a1"])
    core.post("b", requests=["b1", "b2"])
    core.post("b", cancels=["b2"])
    assert list(core.queue) == ["b1"]
    core.post("a", releases=1)  # b1 granted, not yet delivered to b
    assert core.owners["b"].granted == ["b1"]
    core.post("b", cancels=["b1"])  # b no longer wants it: the slot is free again, not leaked
    assert core.calls_used == 0
    assert core.reply("b")["granted"] == []


def test_a_cancel_that_overtakes_its_request_wins() -> None:
    core, _, _ = make(max_calls=1)
    core.post("a", cancels=["a1"])
    assert core.post("a", requests=["a1"])["granted"] == []
    assert core.calls_used == 0


def test_waiters_are_woken_and_holders_recalled_when_another_owner_waits() -> None:
    core, _, woken = make(max_calls=1)
    core.post("a", requests=["a1"])
    assert core.reply("a")["contended"] is False
    woken.clear()
    core.post("b", requests=["b1"])
    assert "a" in woken  # a may be keeping its slot for reuse: tell it to give it back
    assert core.has_news("a")
    assert core.reply("a")["contended"] is True
    core.post("a", releases=1)
    assert "b" in woken


def test_silent_owner_loses_its_leases_after_the_ttl_only() -> None:
    core, clock, _ = make(max_calls=2, max_sandboxes=2, lease_ttl_s=10)
    core.post("a", requests=["a1", "a2"])
    assert core.try_sandbox("a")
    core.post("b", requests=["b1"])
    clock.now += 9
    core.post("b")
    assert core.expire() == []
    clock.now += 2
    gone = core.expire()
    assert [o.owner for o in gone] == ["a"] and gone[0].calls == 2 and gone[0].sandboxes == 1
    assert core.reply("b")["granted"] == ["b1"]
    assert core.calls_used == 1 and core.sandboxes_used == 0


def test_an_unknown_owner_is_adopted_with_what_it_holds() -> None:
    core, _, _ = make(max_calls=2)
    core.post("a", holdings=(2, 1))  # e.g. after the actor restarted
    assert core.calls_used == 2 and core.sandboxes_used == 1
    assert core.post("b", requests=["b1"])["granted"] == []
    core.post("a", releases=2)
    assert core.reply("b")["granted"] == ["b1"]


def test_a_refused_sandbox_asks_the_holder_with_the_most_idle_ones_to_close_one() -> None:
    core, _, woken = make(max_calls=4, max_sandboxes=3)
    assert core.try_sandbox("a") and core.try_sandbox("a") and core.try_sandbox("c")
    assert not core.try_sandbox("b")
    assert "a" in woken and core.reply("a")["reclaim"] == 1
    assert core.reply("c")["reclaim"] == 0
    core.post("a", sandbox_releases=1)
    assert "b" in woken
    assert core.reply("b")["sandbox_grants"] == 1  # the freed slot is b's already: no second ask
    assert core.sandboxes_used == 3
    assert not core.try_sandbox("c")  # a later asker waits its turn


def test_creation_bucket_spaces_tokens_after_the_burst() -> None:
    core, clock, _ = make(creation_rate=10.0, creation_burst=2)
    delays = [core.creation_delay() for _ in range(5)]
    assert delays == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3])
    clock.now += 10
    assert core.creation_delay() == 0.0
    core.penalize(2.0)
    assert core.creation_delay() == pytest.approx(2.0)


def test_config_changes_only_when_nobody_holds_anything() -> None:
    core, _, _ = make(max_calls=2)
    core.post("a", requests=["a1"])
    assert core.configure(LimiterConfig(8)).max_calls == 2
    core.post("a", releases=1)
    assert core.configure(LimiterConfig(8)).max_calls == 8


def test_config_rejects_bad_limits() -> None:
    for bad in ({"max_calls": 0}, {"max_calls": 1, "creation_rate": 0}, {"max_calls": 1, "lease_ttl_s": -1}):
        with pytest.raises(ValueError):
            LimiterConfig(**bad)  # type: ignore[arg-type]


def test_without_ray_initialised_the_pool_falls_back_to_a_local_limiter_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import ray

    import sandboxkit.distributed as dist
    from sandboxkit import SandboxPool

    assert not ray.is_initialized()
    dist._warned_local = False
    with caplog.at_level(logging.WARNING, logger="sandboxkit.distributed"):
        first = SandboxPool("subprocess", max_concurrency=3, limiter="ray")
        second = dist.ray_limiter(5, backend="x")
    assert isinstance(first._limiter, LocalLimiter) and isinstance(second, LocalLimiter)
    assert first.metrics()["max_concurrency"] == 3
    warnings = [r for r in caplog.records if "limiter='ray'" in r.getMessage()]
    assert len(warnings) == 1 and "not initialised" in warnings[0].getMessage()


def test_importing_sandboxkit_does_not_import_ray() -> None:
    code = "import sys, sandboxkit, sandboxkit.distributed; sys.exit(1 if 'ray' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_message_still_in_flight_from_an_owner_that_left_does_not_bring_it_back() -> None:
    core, _, _ = make(max_calls=2)
    core.post("a", requests=["a1"])
    core.remove("a", final=True)
    core.post("a", sandbox_releases=1, holdings=(1, 1))  # sent before it left, arrives after
    assert "a" not in core.owners and core.calls_used == 0 and core.sandboxes_used == 0
    assert not core.try_sandbox("a")


def test_fair_share_keeps_remainder_slots_put_unless_someone_below_share_waits() -> None:
    core, _, _ = make(max_calls=5)
    core.post("a", requests=["a1", "a2", "a3", "a4"])
    core.post("b", requests=["b1", "b2", "b3"])  # b1 granted (5th slot); b2, b3 wait
    assert core.starving() and core.keep_limit("a") == 2  # b waits below its share of 2: a keeps only 2
    core.post("a", releases=2)  # a gives back down to its share: b reaches 2 of 2
    assert core.reply("b")["granted"] == ["b2", "b3"]
    core.post("a", requests=["a5"])  # a (2 of 2) waits; b holds the remainder slot
    assert not core.starving()
    assert core.keep_limit("b") == 3  # share 2 + the remainder slot: it stays put, no bouncing
    assert core.keep_limit("a") == 5  # nobody else waits: a may keep what it gets


def test_the_placement_backend_is_the_ray_entry_point() -> None:
    import sandboxkit.distributed as dist
    from sandboxkit.distributed import RayPlacedBackend
    from sandboxkit.registry import backend, backend_class

    assert not hasattr(dist, "register_backend"), "the entry point registers it; no second way"
    assert backend_class("ray") is RayPlacedBackend
    placed = backend("ray", inner="subprocess", num_cpus=2)
    assert isinstance(placed, RayPlacedBackend) and placed.num_cpus == 2
    assert "python" in placed.capabilities.languages  # the inner backend's, probed locally
