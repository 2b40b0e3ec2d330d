"""Reward shaping: modes, penalties, and None for infrastructure and invalid rows."""

from __future__ import annotations

import pytest

from sandboxkit.judge import Shaping, parse_shaping


def test_pass_rate_is_the_default() -> None:
    shape = parse_shaping(None)
    assert shape == Shaping() and not shape.stop_on_first_failure
    assert shape.reward("failed", 3, 4) == 0.75
    assert shape.reward("ok", 4, 4) == 1.0


def test_all_or_nothing_stops_at_the_first_failure() -> None:
    shape = parse_shaping("all_or_nothing")
    assert shape.stop_on_first_failure
    assert parse_shaping("binary") == shape == parse_shaping({"mode": "binary"})
    assert shape.reward("failed", 3, 4) == 0.0
    assert shape.reward("ok", 4, 4) == 1.0


def test_penalties_replace_the_score_for_their_status() -> None:
    shape = parse_shaping("pass_rate, compile_error=-1, timeout=-0.5, banned=-1")
    assert shape.penalties == {"compile_error": -1.0, "timeout": -0.5, "banned": -1.0}
    assert shape.reward("compile_error", 0, 3) == -1.0
    assert shape.reward("timeout", 2, 3) == -0.5
    assert shape.reward("failed", 2, 4) == 0.5
    assert str(shape) == "pass_rate,banned=-1,compile_error=-1,timeout=-0.5"
    assert parse_shaping({"mode": "all_or_nothing", "penalties": {"no_code": -1}}).reward("no_code", 0, 1) == -1.0


@pytest.mark.parametrize("status", ["invalid", "infra_error"])
def test_no_reward_for_invalid_rows_or_infrastructure(status: str) -> None:
    assert parse_shaping("pass_rate,failed=-1").reward(status, 0, 3) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("best_of_n", "unknown shaping mode"),
        ("pass_rate,timeout=lots", "not a number"),
        ("pass_rate,ok=5", "no penalty can be set"),
        ("pass_rate,infra_error=-1", "no penalty can be set"),
    ],
)
def test_bad_shaping_strings(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shaping(text)
