"""Isolated assert cases carry numpy values and builtin subclasses as data, with the in-process verdict.

A correct solution that returns ``np.int64(2)``, an array, or an ``int`` subclass must pass with
``isolate_asserts`` as it does in-process (not ``cannot_isolate``), a wrong one must fail, and a
subclass's own ``__eq__`` never decides: it travels as its base value. The codec half checks that
every numpy scalar and array comes back with its exact type, dtype, shape and bytes, and that the
decoder refuses whatever is not one of those (object and structured dtypes by name, bad lengths).
"""

from __future__ import annotations

import datetime as dt
import enum
import importlib.util
import sys
from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxkit import SandboxPool
from sandboxkit.judge import grade
from support.judge import codec_roundtrip as _roundtrip
from support.marks import missing, requires

pytestmark = requires(importlib.util.find_spec("numpy") is not None, "numpy is not installed")


def _numpy_strategies() -> tuple[Any, Any]:
    import numpy as np
    from hypothesis.extra import numpy as hnp

    kinds = (
        hnp.boolean_dtypes()
        | hnp.integer_dtypes(endianness="=")
        | hnp.unsigned_integer_dtypes(endianness="?")
        | hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64))
        | hnp.complex_number_dtypes(endianness="?")
        | hnp.unicode_string_dtypes(min_len=1, max_len=4)
        | hnp.byte_string_dtypes(min_len=1, max_len=4)
        | hnp.datetime64_dtypes()
        | hnp.timedelta64_dtypes()
        | st.just(np.dtype(np.longdouble))
    )
    arrays = kinds.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)))
    scalars = kinds.flatmap(lambda dt: hnp.arrays(dt, ()).map(lambda a: a[()]))
    return arrays, scalars


ARRAYS, SCALARS = _numpy_strategies() if importlib.util.find_spec("numpy") else (st.nothing(), st.nothing())


@settings(max_examples=150, deadline=None)
@given(ARRAYS)
def test_arrays_come_back_with_their_dtype_shape_and_bytes(codec: dict[str, Any], a: Any) -> None:
    import numpy as np

    back = _roundtrip(codec, a if a.ndim < 2 else np.asfortranarray(a))  # the memory order is irrelevant
    assert type(back) is np.ndarray and back.dtype == a.dtype and back.dtype.str == a.dtype.str
    assert back.shape == a.shape and back.tobytes() == a.tobytes()  # NaN payloads and -0.0 included
    assert back.flags.writeable and back.flags.owndata


@settings(max_examples=150, deadline=None)
@given(SCALARS)
def test_scalars_come_back_as_the_same_numpy_type(codec: dict[str, Any], v: Any) -> None:

    back = _roundtrip(codec, v)
    assert type(back) is type(v) and _value_bytes(back) == _value_bytes(v), (v, back)


def _value_bytes(x: Any) -> bytes:
    """A scalar's bytes without padding: x86's long double is 10 bytes of value in 16 (the other 6 are
    whatever the stack held, so comparing them failed now and then, on Python 3.12 first)."""
    import numpy as np

    raw = np.asarray(x).tobytes()
    if type(x) in (np.longdouble, np.clongdouble) and np.finfo(np.longdouble).nmant == 63:
        return b"".join(raw[i : i + 10] for i in range(0, len(raw), 16))
    return raw


def test_numpy_values_inside_containers_and_object_arrays(codec: dict[str, Any]) -> None:
    import numpy as np

    obj = np.empty((2, 2), dtype=object)
    obj[0, 0], obj[0, 1], obj[1, 0], obj[1, 1] = [1, (2,)], "s", None, np.float32(1.5)
    value = {"a": [np.int8(-3), np.array([], dtype="<U1")], "obj": obj, "t": (np.bool_(False), np.float64("nan"))}
    back = _roundtrip(codec, value)
    assert type(back["a"][0]) is np.int8 and back["a"][0] == -3 and back["a"][1].shape == (0,)
    got = back["obj"]
    assert got.dtype == object and got.shape == (2, 2) and got[0, 0] == [1, (2,)] and type(got[0, 0][1]) is tuple
    assert got[0, 1] == "s" and got[1, 0] is None and type(got[1, 1]) is np.float32
    assert back["t"][0] is np.False_ and np.isnan(back["t"][1]) and type(back["t"][1]) is np.float64


def test_what_is_not_carried_stays_a_handle(codec: dict[str, Any]) -> None:
    import numpy as np

    structured = np.zeros(2, dtype=[("x", "<i4"), ("y", "<f8")])
    big = np.zeros(codec["_NP_CAP"] // 8 + 1)
    for value in (structured, structured[0], np.zeros(2, dtype="V3"), np.ma.array([1]), big):
        seen: list[Any] = []
        assert codec["_enc"](value, seen.append) is None  # handed to `other`, whole
        assert len(seen) == 1 and seen[0] is value


@pytest.mark.parametrize(
    "node",
    [
        ["na", "|O", [1], "AAAAAAAAAAA="],  # object dtype by name: never numpy's unpickling
        ["na", "|V8", [1], "AAAAAAAAAAA="],
        ["na", "<i4,<i4", [1], "AAAAAAAAAAA="],
        ["na", "[('a', '<i4')]", [1], "AAAA"],
        ["na", "<i8", [2], "AAAAAAAAAAA="],  # 8 bytes for 2 items
        ["na", "<i8", [-1], ""],
        ["na", "<i8", [1] * 70, "AAAAAAAAAAA="],
        ["na", "|b1", [1], "Ag=="],  # a bool byte that is neither 0 nor 1
        ["na", "<U1", [1], "AAAR/w=="],  # a code point past U+10FFFF
        ["ns", "<U0", ""],
        ["ns", "<i8", 5],
        ["nO", [2], 1],
        ["nO", "x"],
    ],
)
def test_malformed_numpy_nodes_raise(codec: dict[str, Any], node: list[Any]) -> None:
    with pytest.raises((ValueError, TypeError, IndexError)):
        codec["_dec"](node, lambda n: ("handle", n))


def test_without_numpy_a_numpy_node_says_so(codec: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    node = codec["_loads"](codec["_dumps"](codec["_enc"](np.arange(3), lambda o: ["h", 0])))
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` now raises ImportError
    with pytest.raises(codec["_NoNumpy"]):
        codec["_dec"](node, lambda n: ("handle", n))


class Yes(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class Colour(enum.IntEnum):
    RED = 1


class Loud(str):
    def __str__(self) -> str:
        return "LOUD"


class Hidden(dict[str, int]):
    def items(self) -> Any:
        return []

    def __iter__(self) -> Any:
        return iter(())


class Tally(Counter[str]):
    pass


def test_builtin_subclasses_travel_as_their_base_value(codec: dict[str, Any]) -> None:
    cases = [
        (Yes(3), 3, int),
        (Colour.RED, 1, int),
        (Loud("ab"), "ab", str),
        (Hidden(a=1), {"a": 1}, dict),
        (Tally("aab"), Counter({"a": 2, "b": 1}), Counter),
        (type("F", (float,), {})(1.5), 1.5, float),
        (type("T", (tuple,), {"x": 1})((1, [2])), (1, [2]), tuple),
        (type("B", (bytes,), {})(b"\x00z"), b"\x00z", bytes),
        (type("S", (frozenset,), {})({1}), frozenset({1}), frozenset),
    ]
    for value, plain, base in cases:
        back = _roundtrip(codec, value)
        assert type(back) is base and back == plain, (value, back)
    assert _roundtrip(codec, Yes(3)) != 2  # its own __eq__ is gone


def _liar(base: type) -> type:
    """A subclass of ``base`` whose ``__eq__`` says yes to anything (and that hashes as its base)."""
    return type("Liar" + base.__name__, (base,), {"__eq__": lambda self, other: True, "__hash__": base.__hash__})


BASE_VALUES = st.one_of(
    st.integers().map(lambda v: (int, v)),
    st.floats(allow_nan=False).map(lambda v: (float, v)),
    st.complex_numbers(allow_nan=False).map(lambda v: (complex, v)),
    st.text(max_size=6).map(lambda v: (str, v)),
    st.binary(max_size=6).map(lambda v: (bytes, v)),
    st.lists(st.integers(), max_size=4).map(lambda v: (list, v)),
    st.lists(st.text(max_size=2), max_size=4).map(lambda v: (tuple, tuple(v))),
    st.frozensets(st.integers(), max_size=4).map(lambda v: (frozenset, v)),
    st.sets(st.integers(), max_size=4).map(lambda v: (set, v)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=3).map(lambda v: (dict, v)),
)


@settings(max_examples=100, deadline=None)
@given(BASE_VALUES)
def test_any_liar_subclass_comes_back_as_its_exact_base_value(codec: dict[str, Any], item: tuple[type, Any]) -> None:
    base, plain = item
    back = _roundtrip(codec, [_liar(base)(plain)])[0]
    assert type(back) is base and back == plain
    assert back != (plain, "something else")  # the liar's __eq__ did not travel


def test_from_the_solution_a_subclass_keeps_its_name_and_attributes(codec: dict[str, Any]) -> None:
    # In the solution's process, the node also names the object's handle: the checker reads the
    # attributes the class added through it (here the handle is the object itself).
    codec["_SUB"]["on"] = True
    try:
        red, tally, again = _roundtrip(codec, [Colour.RED, Tally("aab"), Colour.RED])
    finally:
        codec["_SUB"]["on"] = False
    assert type(red) is not Colour and type(red).__name__ == "Colour" and type(red).__bases__ == (int,)
    assert red == 1 and red.name == "RED" and red.value == 1 and again is red and hash(red) == hash(1)
    assert type(tally).__bases__ == (Counter,) and tally == Counter("aab") and tally.most_common(1) == [("a", 2)]
    with pytest.raises(AttributeError):
        red.__secret__  # noqa: B018  (dunders are never forwarded)
    assert codec["_enc"](red, lambda o: ["h", o]) == ["h", Colour.RED]  # sent back as the solution's object
    lazy = type("Lazy", (defaultdict,), {})(lambda: 0, {"a": 1})  # no data even as its base: a handle
    assert codec["_enc"](lazy, lambda o: ["h", type(o).__name__]) == ["h", "Lazy"]
    for bad in (["sub", 3, "X", 1], ["sub", ["h", 0], "X", True], ["sub", ["h", 0], 5, 1]):
        with pytest.raises(ValueError):
            codec["_dec"](bad, lambda n: ("handle", n))


#: One solution, many functions: each test below gets the same verdict in both modes.
SOLUTION = """
import datetime as dt
import enum
from typing import NamedTuple
import numpy as np

class Yes(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

class Colour(enum.IntEnum):
    RED = 1

class Words(list):
    def __eq__(self, other):
        return True

def i64(x):
    return np.int64(x) + 1

def f64(x):
    return np.float64(x) + 1

def arr(x):
    return np.array([x + 1])

def grid(n):
    return np.arange(n * n, dtype=np.float32).reshape(n, n).T

def kinds():
    return np.str_("ab"), np.bytes_(b"x"), np.bool_(True), np.complex64(1 + 2j), np.uint8(255), np.array(5.5)

def empty():
    return np.zeros((0, 3), dtype=np.int16)

def objects():
    return np.array([[1, "a"], [None, (2,)]], dtype=object)

def yes(x):
    return Yes(x)

def colour():
    return Colour.RED

def words():
    return Words(["a", "b"])

def total(a):
    return int(a.sum())

def sort_it(a):
    a.sort()

def scale(a, by=2):
    a *= by
    return a

def negate(a):
    a[:] = -a

def fill(boxes):
    boxes[0][0] = 7

class Pair(NamedTuple):
    x: int
    y: int
    def norm(self):
        return abs(self.x) + abs(self.y)

class Bag(list):
    def total(self):
        return sum(self)

def pair():
    return Pair(1, -2)

def bag():
    return Bag([1, 2])

def ident(x):
    return x
"""

#: (test, passes): ``passes`` is what both modes must agree on.
VALUE_TESTS = [
    ("assert i64(1) == 2", True),
    ("assert i64(2) == 2", False),
    ("assert f64(1) == 2.0 and isinstance(f64(1), float)", True),
    ("assert f64(1) == 2.5", False),
    ("import numpy as np\nassert (arr(1) == np.array([2])).all()", True),
    ("assert np.array_equal(arr(1), np.array([2]))", True),
    ("assert np.array_equal(arr(2), np.array([2]))", False),
    ("assert arr(1).tolist() == [2] and arr(1).dtype == np.int64", True),
    ("g = grid(2)\nassert g.dtype == np.float32 and g.tolist() == [[0.0, 2.0], [1.0, 3.0]]", True),
    (
        "import numpy as np\ns, b, t, c, u, d = kinds()\n"
        "assert type(s) is np.str_ and s == 'ab' and b == b'x' and t is np.True_\n"
        "assert c == 1 + 2j and c.dtype == np.complex64 and type(u) is np.uint8 and u == 255 and d.shape == ()",
        True,
    ),
    ("assert empty().shape == (0, 3) and empty().dtype == np.int16", True),
    ("o = objects()\nassert o.dtype == object and o[1, 1] == (2,) and o[0, 1] == 'a' and o[1, 0] is None", True),
    ("assert total(np.arange(4)) == 6", True),
    ("a = np.array([3, 1, 2])\nassert sort_it(a) is None and a.tolist() == [1, 2, 3]", True),
    ("b = np.arange(3)\nr = scale(b, by=3)\nassert r is b and b.tolist() == [0, 3, 6]", True),
    ("x = np.arange(4)\nnegate(x[::2])\nassert x.tolist() == [0, 1, -2, 3]", True),
    ("ro = np.arange(3)\nro.flags.writeable = False\nassert total(ro) == 3 and total(ro[::-1]) == 3", True),
    ("o = np.empty(1, dtype=object)\ninner = [0]\no[0] = inner\nfill(o)\nassert o[0] == [7] and inner == [7]", True),
    ("a = np.array([3, 1])\nsort_it(a)\nassert a.tolist() == [3, 1]", False),
    ("assert yes(2) == 2 and yes(2) + 1 == 3", True),
    ("assert colour() == 1 and colour() == Colour.RED", True),
    ("assert words() == ['a', 'b']", True),
    ("c = colour()\nassert c.name == 'RED' and c is Colour.RED and isinstance(c, Colour) and ident(c) is c", True),
    ("assert {colour(): 'r'}[1] == 'r' and str(colour() + 1) == '2' and type(colour()).__name__ == 'Colour'", True),
    (
        "import copy\np = pair()\nassert p == (1, -2) and p.x == 1 and p.norm() == 3 and isinstance(p, Pair)\n"
        "assert copy.deepcopy(p) == (1, -2) and copy.copy(p).y == -2 and copy.copy(colour()) is Colour.RED",
        True,
    ),
    ("b = bag()\nassert b == [1, 2] and b.total() == 3 and isinstance(b, list)", True),
    ("assert pair().norm() == 4", False),
    ("assert colour().name == 'BLUE'", False),
]


async def test_same_verdict_isolated_and_in_process(pool: SandboxPool) -> None:
    cases = [{"type": "assert", "code": test} for test, _ in VALUE_TESTS]
    want = ["passed" if passes else "error" for _, passes in VALUE_TESTS]
    for isolate in (True, False):
        verdict = await grade(pool, SOLUTION, cases, isolate_asserts=isolate, shaping="pass_rate", timeout_s=5.0)
        got = [c.status for c in verdict.cases]
        assert got == want, (
            isolate,
            [(t, c.status, c.message) for (t, _), c in zip(VALUE_TESTS, verdict.cases, strict=True)],
        )


async def test_a_subclass_cannot_forge_equality_under_isolation(pool: SandboxPool) -> None:
    # In-process, Yes(3) == 2 is the subclass's call; isolated, it is int 3 against 2.
    tests = ["assert yes(3) == 2", "assert 2 == yes(3)", "assert [yes(3)] == [2]", "assert words() == ['z']"]
    cases = [{"type": "assert", "code": t} for t in tests]
    plain = await grade(pool, SOLUTION, cases, isolate_asserts=False, shaping="pass_rate", timeout_s=5.0)
    assert [c.status for c in plain.cases] == ["passed"] * 4  # the hole
    isolated = await grade(pool, SOLUTION, cases, isolate_asserts=True, shaping="pass_rate", timeout_s=5.0)
    assert [c.status for c in isolated.cases] == ["error"] * 4, isolated.cases
    assert isolated.reward == 0.0


async def test_a_checker_without_numpy_cannot_isolate(pool: SandboxPool) -> None:
    # The test hides numpy from its own process: the value it gets back cannot be rebuilt as data.
    test = "import sys\nsys.modules['numpy'] = None\nassert i64(1) == 2"
    verdict = await grade(pool, SOLUTION, [{"type": "assert", "code": test}], isolate_asserts=True, timeout_s=5.0)
    assert verdict.status == "infra_error" and verdict.reward is None, verdict
    assert verdict.error is not None and verdict.error.startswith("cannot_isolate:") and "numpy" in verdict.error


@pytest.mark.docker
async def test_on_docker_too() -> None:
    import uuid

    from sandboxkit.backends.docker import DockerBackend
    from support.judge import FAST

    if not DockerBackend.availability().usable:
        missing("the docker backend is not usable here")  # skip locally, fail under CI=true
    backend = DockerBackend(labels={"sandboxkit.test": uuid.uuid4().hex})
    cases = [{"type": "assert", "code": test} for test, _ in VALUE_TESTS]
    try:
        async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
            verdict = await grade(pool, SOLUTION, cases, isolate_asserts=True, shaping="pass_rate", timeout_s=5.0)
    finally:
        await backend.aclose()
    assert [c.status for c in verdict.cases] == ["passed" if passes else "error" for _, passes in VALUE_TESTS]


FIXED_ZONES = st.none() | st.builds(
    dt.timezone, st.timedeltas(min_value=-dt.timedelta(hours=23), max_value=dt.timedelta(hours=23))
)
DATETIMES = st.one_of(
    st.dates(),
    st.datetimes(timezones=FIXED_ZONES),
    st.times(timezones=FIXED_ZONES),
    st.timedeltas(),
    st.builds(lambda d, f: d.replace(fold=f), st.datetimes(), st.integers(0, 1)),
)


@settings(max_examples=100, deadline=None)
@given(DATETIMES)
def test_datetime_values_come_back_exactly(codec: dict[str, Any], value: Any) -> None:
    back = _roundtrip(codec, value)
    assert type(back) is type(value) and back == value and repr(back) == repr(value)


def test_a_zone_that_is_code_stays_a_handle(codec: dict[str, Any]) -> None:
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        zone = zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone data here")
    value = dt.datetime(2020, 1, 1, tzinfo=zone)
    seen: list[Any] = []
    assert codec["_enc"](value, seen.append) is None and seen == [value]
    for bad in (["da", 2020, 13, 1], ["dt", 1, 1, 1, 0, 0, 0, 0, 2, None], ["ti", 0, 0, 0, 0, 0, ["h", 1]]):
        with pytest.raises(ValueError):
            codec["_dec"](bad, lambda n: ("handle", n))


DATES = """
import datetime
def gap(a, b):
    return datetime.date.fromisoformat(b) - datetime.date.fromisoformat(a)
def noon(day):
    return datetime.datetime.combine(day, datetime.time(12), tzinfo=datetime.timezone.utc)
"""


async def test_datetime_values_get_the_in_process_verdict(pool: SandboxPool) -> None:
    tests = [
        ("import datetime\nassert gap('2020-01-01', '2020-03-01') == datetime.timedelta(days=60)", True),
        ("assert gap('2020-01-01', '2020-03-01').days == 59", False),
        (
            "import datetime as d\nn = noon(d.date(2020, 2, 29))\n"
            "assert n == d.datetime(2020, 2, 29, 12, tzinfo=d.timezone.utc) and n.tzinfo is d.timezone.utc",
            True,
        ),
    ]
    cases = [{"type": "assert", "code": t} for t, _ in tests]
    for isolate in (True, False):
        verdict = await grade(pool, DATES, cases, isolate_asserts=isolate, shaping="pass_rate", timeout_s=5.0)
        assert [c.status for c in verdict.cases] == ["passed" if ok else "error" for _, ok in tests], verdict.cases
