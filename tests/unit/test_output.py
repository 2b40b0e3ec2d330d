"""Head+tail cutting of long output: the shared helper every backend uses."""

from __future__ import annotations

import pytest

from sandboxkit.models import Limits
from sandboxkit.output import DEFAULT_STOP_BYTES, HeadTail, cut_head_tail, cut_marker


def test_short_output_is_whole_and_not_flagged() -> None:
    assert cut_head_tail(b"abc", 3) == (b"abc", False)
    acc = HeadTail(3)
    acc.feed(b"ab")
    acc.feed(b"c")
    assert (acc.value(), acc.truncated) == (b"abc", False)


def test_long_output_keeps_both_ends_and_marks_the_cut() -> None:
    data = b"HEAD" + b"." * 1000 + b"Traceback: boom"
    text, cut = cut_head_tail(data, 40, 0.25)
    assert cut
    assert text.startswith(b"HEAD") and text.endswith(b"Traceback: boom")
    assert cut_marker(len(data) - 40) in text


@pytest.mark.parametrize("chunk", [1, 7, 64, 5000])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.5, 1.0])
def test_streaming_accumulator_matches_the_one_shot_cut(chunk: int, fraction: float) -> None:
    data = bytes(range(256)) * 20
    acc = HeadTail(300, fraction)
    for i in range(0, len(data), chunk):
        acc.feed(data[i : i + chunk])
    assert acc.total == len(data)
    assert (acc.value(), acc.truncated) == cut_head_tail(data, 300, fraction)


def test_stop_bytes_default_and_floor() -> None:
    assert Limits().stop_bytes() == DEFAULT_STOP_BYTES
    assert Limits(output_bytes=100 << 20).stop_bytes() == 100 << 20
    assert Limits(output_bytes=10, output_stop_bytes=5).stop_bytes() == 10
