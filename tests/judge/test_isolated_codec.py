"""Property tests: the isolated harness's value encoding carries values exactly, and decodes only data.

The codec is the whole trust boundary of isolated assert cases: the checker compares what it decodes,
so a value must come back with the same type at every level (``(1, 2) != [1, 2]``), and whatever bytes
the solution sends, decoding either gives plain data (or a handle) or raises, and never runs code.
"""

from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.judge import codec_roundtrip as _roundtrip


class Opaque:
    """Not data: stays behind as a handle."""


def _same(a: Any, b: Any) -> bool:
    """Equal with the same type at every level (and NaN equal to NaN, -0.0 apart from 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple, deque)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip([*a.items()], [*b.items()], strict=True))
    if isinstance(a, (set, frozenset)):  # NaN members are not equal to themselves: compare canonical forms
        return _canon(a) == _canon(b)
    return bool(a == b)


def _canon(v: Any) -> Any:
    """A form where sets are sorted and floats are their repr, so NaN members compare by value."""
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, sorted(repr(_canon(x)) for x in v))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_canon(x) for x in v])
    return repr(v) if isinstance(v, (float, complex)) else v


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**1000, max_value=2**1100)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.complex_numbers(allow_nan=False)
    | st.fractions()
    | st.decimals(allow_nan=False)
)
hashable = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=6)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(hashable, inner, max_size=3)
        | st.sets(hashable, max_size=3)
        | st.builds(bytearray, st.binary(max_size=4))
        | st.builds(lambda xs: deque(xs, maxlen=5), st.lists(inner, max_size=3))
        | st.builds(OrderedDict, st.dictionaries(st.text(max_size=3), inner, max_size=3))
    ),
    max_leaves=12,
)


@settings(max_examples=120, deadline=None)
@given(values)
def test_every_value_comes_back_with_its_exact_type(codec: dict[str, Any], value: Any) -> None:
    back = _roundtrip(codec, value)
    assert _same(back, value) or (value != value and back != back), (value, back)


def test_the_types_a_test_can_tell_apart_stay_apart(codec: dict[str, Any]) -> None:
    point = namedtuple("Point", "x y")
    odd = [
        (1, 2),
        [1, 2],
        {1, 2},
        frozenset({1}),
        b"a",
        bytearray(b"a"),
        range(1, 9, 2),
        ...,
        Counter("aab"),
        defaultdict(list, {1: [2]}),
        point(1, 2),
        -0.0,
        Decimal("1.10"),
        Fraction(1, 3),
        "\ud800",
    ]
    for value in odd:
        back = _roundtrip(codec, value)
        assert type(back) is type(value) or type(value).__name__ == "Point", (value, back)
        assert back == value and repr(back) == repr(value), (value, back)
    assert _roundtrip(codec, point(1, 2)).x == 1
    opaque = Opaque()
    assert _roundtrip(codec, [opaque, {"k": opaque}]) == [opaque, {"k": opaque}]


class Sub(list):  # a subclass could carry its own __eq__: it travels as its base value, a plain list
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


def test_subclasses_are_their_base_values_and_objects_are_handles(codec: dict[str, Any]) -> None:
    seen: list[Any] = []
    node = codec["_enc"]([Sub([1]), Opaque(), True], lambda o: seen.append(o) or ["h", 0])
    assert node[1] == ["l", 1] and node[2] == ["h", 0] and node[3] is True
    assert [type(o) for o in seen] == [Opaque]


@settings(max_examples=120, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=10,
    )
)
def test_any_json_decodes_to_data_or_raises(codec: dict[str, Any], garbage: Any) -> None:
    # Whatever a hostile solution sends: plain data or a handle comes back, or an ordinary exception.
    try:
        back = codec["_dec"](json.loads(json.dumps(garbage)), lambda n: ("handle", n[1]))
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, ArithmeticError):
        return
    allowed = (type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, set, frozenset, dict, range)
    allowed += (type(...), deque, Decimal, Fraction)

    def check(v: Any) -> None:
        assert isinstance(v, allowed) or (isinstance(v, tuple) and v[:1] == ("handle",)), type(v)
        if isinstance(v, (list, tuple, set, frozenset, deque)):
            for x in v:
                check(x)
        if isinstance(v, dict):
            for k, x in v.items():
                check(k)
                check(x)

    check(back)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=10,
    )
)
def test_the_wire_is_exactly_the_json_packages(codec: dict[str, Any], value: Any) -> None:
    # The harness uses json's C core directly (no json package to import): same bytes, same values.
    wire = codec["_dumps"](value)
    assert wire == json.dumps(value, separators=(",", ":")).encode("utf-8")
    assert repr(codec["_loads"](wire)) == repr(json.loads(wire))


@pytest.mark.parametrize("wire", [b"", b" 1", b"1 ", b"[1]x", b"[1", b"nul", b'{"a":}', b"\xff"])
def test_a_message_that_is_not_one_json_value_is_refused(codec: dict[str, Any], wire: bytes) -> None:
    # Stricter than json.loads (no surrounding whitespace): the peer's _dumps never writes any.
    with pytest.raises(ValueError):
        codec["_loads"](wire)


def test_a_cold_harness_imports_neither_json_nor_ctypes(tmp_path: Any) -> None:
    # Each costs a fresh interpreter ~1.5-2 ms a run; the checker must still be non-dumpable ('ok').
    import subprocess
    import sys

    from sandboxkit.judge.cases import AssertCase
    from sandboxkit.judge.isolated import build_isolated_harness

    case = AssertCase(code="assert add(2, 3) == 5\n")
    script = tmp_path / "harness.py"
    script.write_text(build_isolated_harness("def add(a, b):\n    return a + b\n", [case], timeout_s=5, prelude=False))
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", str(script)], capture_output=True, text=True, timeout=60
    )
    assert "'status': 'ok'" in run.stdout, (run.stdout, run.stderr[-2000:])
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "_json" in imported and "_ctypes" in imported
    assert not imported & {"json", "ctypes"}, sorted(imported)
