"""Pure pieces of the server, on open-ended input: ceilings, the admission budget, histograms."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandboxkit.prometheus import DEFAULT_BUCKETS, Histogram
from sandboxkit.protocols.sandbox_fusion import FieldError, RunCodeRequest
from sandboxkit.server.admission import Admission
from sandboxkit.server.ceilings import Ceilings

CEILINGS = Ceilings(run_timeout_s=30, compile_timeout_s=60, memory_mb=2048)
timeouts = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False)


@given(run=timeouts, compile_=timeouts, memory=st.integers(min_value=-(2**63), max_value=2**63))
def test_ceilings_never_let_a_request_past_them_and_say_when_they_lowered(
    run: float, compile_: float, memory: int
) -> None:
    body = RunCodeRequest(
        code="x", language="python", run_timeout=run, compile_timeout=compile_, memory_limit_MB=memory
    )
    capped, notes = CEILINGS.apply(body)
    assert capped.run_timeout == min(run, 30) and capped.compile_timeout == min(compile_, 60)
    assert capped.memory_limit_MB == min(memory, 2048)  # <= 0 stays: it means "the server's default"
    assert len(notes) == (run > 30) + (compile_ > 60) + (memory > 2048)
    assert capped.code == body.code and capped.language == body.language


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_timeout_that_is_not_a_positive_number_is_a_field_error(bad: float) -> None:
    with pytest.raises(FieldError, match="run_timeout"):
        CEILINGS.apply(RunCodeRequest(code="x", language="python", run_timeout=bad))


def test_a_ceiling_must_be_positive() -> None:
    with pytest.raises(ValueError, match="memory_mb"):
        Ceilings(memory_mb=0)


@given(st.lists(st.tuples(st.integers(0, 5000), st.booleans()), max_size=60))
def test_admission_budget_holds_and_returns_to_zero(ops: list[tuple[int, bool]]) -> None:
    adm = Admission(max_requests=5, max_bytes=10_000, max_body_bytes=5000, body_timeout_s=1)
    held: list[int] = []
    for size, new in ops:
        if adm.try_reserve(size, new_request=True):
            held.append(size)
            assert adm.requests <= 5
            assert adm.bytes <= 10_000 or adm.requests == 1  # one request always fits
        elif new and held:
            adm.release(held.pop(0), request=True)
    for size in held:
        adm.release(size, request=True)
    assert (adm.requests, adm.bytes) == (0, 0)


@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), max_size=200))
def test_histogram_buckets_are_cumulative_and_count_everything(values: list[float]) -> None:
    hist = Histogram()
    for value in values:
        hist.observe(value)
    buckets, total = hist.snapshot()
    counts = [count for _, count in buckets]
    assert counts == sorted(counts) and counts[-1] == len(values) and buckets[-1][0] == "+Inf"
    for (le, count), bound in zip(buckets, DEFAULT_BUCKETS, strict=False):
        assert count == sum(v <= bound for v in values), le
    assert math.isclose(total, sum(values), rel_tol=1e-9, abs_tol=1e-9)
