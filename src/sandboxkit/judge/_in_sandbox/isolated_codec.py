# ---------------------------------------------------------------- framing and the value encoding
_MSG_CAP = 1 << 30
_BIG = 1 << 1000


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]



def _send(fd, data):
    _write_all(fd, len(data).to_bytes(8, "big") + data)


def _read_n(fd, n):
    parts = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _recv(fd):
    head = _read_n(fd, 8)
    if head is None:
        return None
    n = int.from_bytes(head, "big")
    if n > _MSG_CAP:
        raise ValueError("message too large")
    return _read_n(fd, n) if n else b""


_MUTABLE = (list, dict, set, bytearray, deque, OrderedDict, defaultdict, Counter)
_NT_KEYS = {"__doc__", "__slots__", "_fields", "_field_defaults", "__new__", "_make", "_replace", "__repr__",
            "_asdict", "__getnewargs__", "__match_args__", "__module__", "__annotations__", "__orig_bases__"}
_FACTORIES = {None: None, "list": list, "int": int, "set": set, "dict": dict, "str": str, "float": float}


def _pairs(o, other):
    out = []
    for k, v in o.items():
        out.append(_enc(k, other))
        out.append(_enc(v, other))
    return out


# Identity of the mutable containers a request carries: the checker numbers them as it encodes them
# ("sent"), the solution numbers them in the same order as it decodes them ("ids": id -> number); a
# reply that mentions one of them says ["@", number, contents], and the checker updates its own object
# in place and uses it. So an argument changed in place changes in the test, identities and aliases
# included (``xs[0] is first`` after ``xs.sort()``), and a returned argument ``is`` the test's object.
_REF = {"sent": None, "ids": None, "made": None}
_MUTABLE_TAGS = {"l", "d", "s", "B", "q", "O", "dd", "C", "na", "nO"}


def _mutable(o):
    # The containers an argument changed in place is mirrored back for: numpy arrays too (a.sort()).
    t = type(o)
    return t in _MUTABLE or (t.__name__ == "ndarray" and t is getattr(sys.modules.get("numpy"), "ndarray", None))


def _enc(o, other):
    if _mutable(o):
        if _REF["sent"] is not None:
            _REF["sent"].append(o)
        ids = _REF["ids"]
        if ids is not None and id(o) in ids:
            return ["@", ids[id(o)], _enc_value(o, other)]
    return _enc_value(o, other)


def _enc_value(o, other):
    t = type(o)
    if t is str or t is bool or o is None or t is float:
        return o
    if t is int:
        return o if -_BIG < o < _BIG else ["I", hex(o)]
    if t is list:
        return ["l"] + [_enc(x, other) for x in o]
    if t is tuple:
        return ["t"] + [_enc(x, other) for x in o]
    if t is dict:
        return ["d"] + _pairs(o, other)
    if t is set:
        return ["s"] + [_enc(x, other) for x in o]
    if t is frozenset:
        return ["f"] + [_enc(x, other) for x in o]
    if t is bytes:
        return ["b", o.decode("latin-1")]
    if t is bytearray:
        return ["B", bytes(o).decode("latin-1")]
    if t is complex:
        return ["c", o.real, o.imag]
    if t is range:
        return ["r", _enc(o.start, other), _enc(o.stop, other), _enc(o.step, other)]
    if o is Ellipsis:
        return ["E"]
    if t is OrderedDict:
        return ["O"] + _pairs(o, other)
    if t is Counter:
        return ["C"] + _pairs(o, other)
    if t is defaultdict:
        f = o.default_factory
        name = getattr(f, "__name__", "?") if f is not None else None
        if _FACTORIES.get(name, 0) is f:
            return ["dd", name] + _pairs(o, other)
    if t is deque:
        return ["q", o.maxlen] + [_enc(x, other) for x in o]
    mod = sys.modules.get("decimal")
    if mod is not None and t is mod.Decimal:
        return ["D", str(o)]
    mod = sys.modules.get("fractions")
    if mod is not None and t is mod.Fraction:
        return ["Q", _enc(o.numerator, other), _enc(o.denominator, other)]
    if t.__bases__ == (tuple,) and set(t.__dict__) <= _NT_KEYS | set(getattr(t, "_fields", ())):
        fields = getattr(t, "_fields", None)
        if type(fields) is tuple and all(type(f) is str for f in fields) and len(fields) == len(o):
            return ["nt", t.__name__, list(fields)] + [_enc(x, other) for x in tuple.__iter__(o)]
    mod = sys.modules.get("datetime")
    if mod is not None and t in (mod.date, mod.datetime, mod.time, mod.timedelta, mod.timezone):
        return _dt_enc(o, mod, other)
    np = sys.modules.get("numpy")
    if np is not None and (t is np.ndarray or issubclass(t, np.generic)):
        return _np_enc(o, np, other)
    for base in t.__mro__[1:] if t not in _MUTABLE else ():  # (a defaultdict of a lambda stays a handle)
        plain = _PLAIN.get(base)
        if plain is not None:
            if t.__dict__.get("_sk_carried") is True:
                return other(o.__dict__["_sk_remote"])  # back to the solution as its own object
            # A subclass of a builtin data type travels as its base value, read with the base type's
            # own methods: its __eq__ (or __iter__, __str__...) never decides what the test sees.
            value = _enc(plain(o), other)
            if type(value) is list and value[:1] == ["h"]:
                return other(o)  # the base value is no data either (a defaultdict of a lambda)
            return ["sub", other(o), t.__name__, value] if _SUB["on"] else value
    return other(o)


# On in the solution's process: a subclass instance travels as ["sub", its handle, its class's name,
# its base value]. The checker makes it an instance of a local subclass of the base type (same name,
# no methods of its own), so ``==``, hashing and arithmetic are the base type's, while an attribute the
# class added (an enum member's ``name``, a NamedTuple's field or method) is read from the solution's
# object through the handle, as for any handle; passed back to the solution, it is that object.
_SUB = {"on": False}
_CARRIED_TYPES = {}
_CARRIED_SAME = {}
_IMMUTABLE = (int, float, complex, str, bytes, tuple, frozenset)


def _carried_getattr(self, name):
    if name[:2] == "__":
        raise AttributeError(name)
    remote = self.__dict__.get("_sk_remote")
    if remote is None:
        raise AttributeError(name)
    return getattr(remote, name)


def _carried_copy(self, memo=None):
    base = type(self).__bases__[0]
    if base in _IMMUTABLE:
        return self  # as copying an enum member (or an int) gives it back
    value = _PLAIN[base](self)
    if memo is not None:
        import copy
        value = copy.deepcopy(value, memo)
    return _carried_new(type(self), value, self.__dict__.get("_sk_remote"))


def _carried_new(cls, value, remote):
    base = cls.__bases__[0]
    if base is defaultdict:
        obj = cls(value.default_factory, value)
    elif base is deque:
        obj = cls(value, value.maxlen)
    else:
        obj = cls(value)
    obj.__dict__["_sk_remote"] = remote
    return obj


def _carried(node, name, value, handle):
    if type(node) is not list or node[:1] != ["h"]:
        raise ValueError("not a handle")
    base = type(value)
    if base not in _PLAIN:
        raise ValueError("not a base value")
    remote = _dec(node, handle)
    if base in _IMMUTABLE:
        same = _CARRIED_SAME.get(id(remote))  # the same object of the solution's is the same here
        if same is not None and same[0] is remote and type(same[1]).__bases__[0] is base:
            return same[1]
    cls = _CARRIED_TYPES.get((name, base))
    if cls is None:
        attrs = {"__getattr__": _carried_getattr, "__copy__": _carried_copy, "__deepcopy__": _carried_copy,
                 "_sk_carried": True, "__module__": "solution", "__qualname__": name}
        cls = _CARRIED_TYPES[(name, base)] = type(name, (base,), attrs)
    obj = _carried_new(cls, value, remote)
    if base in _IMMUTABLE:
        _CARRIED_SAME[id(remote)] = (remote, obj)
    return obj


# datetime values (exact types): their fields, rebuilt by the constructors, which check the ranges. A
# tzinfo other than a fixed-offset ``timezone`` (a zoneinfo zone: code) keeps the value a handle.
def _dt_enc(o, mod, other):
    t = type(o)
    if t is mod.timedelta:
        return ["td", o.days, o.seconds, o.microseconds]
    if t is mod.timezone:
        offset = o.utcoffset(None)
        name = o.tzname(None)
        return ["tz", _dt_enc(offset, mod, other), None if name == mod.timezone(offset).tzname(None) else name]
    if t is mod.date:
        return ["da", o.year, o.month, o.day]
    tz = o.tzinfo
    if tz is not None and type(tz) is not mod.timezone:
        return other(o)
    tz = None if tz is None else _dt_enc(tz, mod, other)
    if t is mod.time:
        return ["ti", o.hour, o.minute, o.second, o.microsecond, o.fold, tz]
    return ["dt", o.year, o.month, o.day, o.hour, o.minute, o.second, o.microsecond, o.fold, tz]


def _dt_dec(tag, rest):
    import datetime
    if tag == "td":
        return datetime.timedelta(_int(rest[0]), _int(rest[1]), _int(rest[2]))
    if tag == "tz":
        offset = _dt_dec(rest[0][0], rest[0][1:]) if type(rest[0]) is list and rest[0][:1] == ["td"] else None
        if offset is None:
            raise ValueError("bad timezone")
        return datetime.timezone(offset) if rest[1] is None else datetime.timezone(offset, _str(rest[1]))
    if tag == "da":
        return datetime.date(*[_int(x) for x in rest[:3]])
    tz = rest[-1]
    if tz is not None:
        if type(tz) is not list or tz[:1] != ["tz"]:
            raise ValueError("bad tzinfo")
        tz = _dt_dec("tz", tz[1:])
    if tag == "ti":
        h, mi, s, us, fold = [_int(x) for x in rest[:5]]
        return datetime.time(h, mi, s, us, tz, fold=fold)
    y, mo, d, h, mi, s, us, fold = [_int(x) for x in rest[:8]]
    return datetime.datetime(y, mo, d, h, mi, s, us, tz, fold=fold)


# The nearest builtin base of a subclass's instance, as an exact builtin (the base type's own methods,
# never the subclass's overrides). Walked in MRO order, so a Counter subclass stays a Counter.
_PLAIN = {
    int: int.__int__,
    float: float.__float__,
    complex: lambda o: complex(complex.real.__get__(o), complex.imag.__get__(o)),
    str: str.__str__,
    bytes: lambda o: bytes.__getitem__(o, slice(None)),
    bytearray: lambda o: bytearray.__getitem__(o, slice(None)),
    tuple: lambda o: tuple.__getitem__(o, slice(None)),
    list: lambda o: list.__getitem__(o, slice(None)),
    dict: lambda o: dict(dict.items(o)),
    set: lambda o: set(set.__iter__(o)),
    frozenset: lambda o: frozenset(frozenset.__iter__(o)),
    OrderedDict: lambda o: OrderedDict(OrderedDict.items(o)),
    Counter: lambda o: Counter(dict(dict.items(o))),
    defaultdict: lambda o: defaultdict(defaultdict.default_factory.__get__(o), dict.items(o)),
    deque: lambda o: deque(deque.__iter__(o), deque.maxlen.__get__(o)),
}

# numpy values: raw bytes of the fixed-size kinds (bool, ints, floats, complex, bytes/str, datetimes),
# named by the dtype's ``str`` (``<i8``, ``|b1``, ``<U3``...), which the decoder matches against this
# pattern before numpy ever parses it. An array over _NP_CAP bytes stays a handle (peak memory of one
# carried array is a few times this, in each process); object arrays carry their elements as values.
_NP_CAP = 1 << 26
_NP_DTYPE = r"[<>|](?:b1|[iu](?:1|2|4|8)|f(?:2|4|8|10|12|16)|c(?:8|16|20|24|32)|[SU][1-9][0-9]{0,8}|[Mm]8(?:\[[0-9]{0,4}[a-zA-Z]{1,2}\])?)"
_NP_NDIM = 64


class _NoNumpy(Exception):
    # The value is a numpy one, and this Python cannot import numpy to rebuild it.
    pass


def _numpy():
    try:
        import numpy
    except ImportError:
        raise _NoNumpy("numpy") from None
    return numpy


def _np_enc(o, np, other):
    scalar = type(o) is not np.ndarray
    a = np.asarray(o)
    dt = a.dtype
    if dt.kind == "O" and not scalar:
        return ["nO", list(a.shape)] + [_enc(x, other) for x in a.reshape(-1)]
    if dt.fields is not None or dt.subdtype is not None or a.nbytes > _NP_CAP or a.ndim > _NP_NDIM:
        return other(o)
    import binascii, re
    if re.fullmatch(_NP_DTYPE, dt.str) is None:
        return other(o)
    raw = binascii.b2a_base64(a.tobytes(), newline=False).decode("ascii")
    return ["ns", dt.str, raw] if scalar else ["na", dt.str, list(a.shape), raw]


def _np_shape(shape):
    if type(shape) is not list or len(shape) > _NP_NDIM:
        raise ValueError("bad shape")
    n = 1
    for d in shape:
        if _int(d) < 0:
            raise ValueError("bad shape")
        n *= d
    return tuple(shape), n


def _np_dec(tag, rest, handle):
    np = _numpy()
    if tag == "nO":
        shape, n = _np_shape(rest[0])
        if len(rest) - 1 != n:
            raise ValueError("bad object array")
        out = np.empty(n, dtype=object)
        for i, x in enumerate(rest[1:]):
            out[i] = _dec(x, handle)
        return out.reshape(shape)
    import binascii, re
    spec = _str(rest[0])
    if re.fullmatch(_NP_DTYPE, spec) is None:
        raise ValueError("not a carried dtype")
    dt = np.dtype(spec)
    shape, n = _np_shape([] if tag == "ns" else rest[1])
    raw = binascii.a2b_base64(_str(rest[-1]))
    if dt.itemsize == 0 or len(raw) != n * dt.itemsize:
        raise ValueError("bad array data")
    if dt.kind == "b" and raw.translate(None, b"\x00\x01"):
        raise ValueError("bad bool")
    if dt.kind == "U" and raw and int(np.frombuffer(raw, spec[0] + "u4").max()) > 0x10FFFF:
        raise ValueError("bad code point")
    a = np.frombuffer(raw, dt).reshape(shape).copy() if n else np.zeros(shape, dt)
    return a[()] if tag == "ns" else a


def _dec_pairs(items, handle):
    it = iter(items)
    return [(_dec(k, handle), _dec(v, handle)) for k, v in zip(it, it)]


def _dec(n, handle):
    if type(n) is list and n:
        made = _REF["made"]
        if made is not None and n[0] in _MUTABLE_TAGS:
            slot = len(made)
            made.append(None)
            made[slot] = value = _dec_value(n, handle)
            return value
        if n[0] == "@":
            return _adopt(_REF["sent"][_int(n[1])], _dec(n[2], handle))
    return _dec_value(n, handle)


def _adopt(old, new):
    # The checker's own object, given the contents the solution left in it.
    t = type(old)
    if type(new) is not t:
        raise ValueError("an argument changed type")
    if t.__name__ == "ndarray":
        # Written only where it changed: a read-only array the solution left alone stays as it is.
        if old.dtype != new.dtype or old.shape != new.shape or old.tobytes() != new.tobytes():
            old[...] = new
    elif t is list or t is bytearray:
        old[:] = new
    elif t is set:
        old.clear()
        old.update(new)
    elif t is deque:
        old.clear()
        old.extend(new)
    else:
        dict.clear(old)
        dict.update(old, new)
    return old


def _dec_value(n, handle):
    t = type(n)
    if t is not list:
        if t is str or t is int or t is float or t is bool or n is None:
            return n
        raise ValueError("not an encoded value: %s" % t.__name__)
    tag, rest = n[0], n[1:]
    if tag == "l":
        return [_dec(x, handle) for x in rest]
    if tag == "t":
        return tuple([_dec(x, handle) for x in rest])
    if tag == "d":
        return dict(_dec_pairs(rest, handle))
    if tag == "s":
        return set([_dec(x, handle) for x in rest])
    if tag == "f":
        return frozenset([_dec(x, handle) for x in rest])
    if tag == "I":
        return int(_str(rest[0]), 16)
    if tag == "b":
        return _str(rest[0]).encode("latin-1")
    if tag == "B":
        return bytearray(_str(rest[0]).encode("latin-1"))
    if tag == "c":
        return complex(_num(rest[0]), _num(rest[1]))
    if tag == "r":
        return range(*[_int(_dec(x, handle)) for x in rest[:3]])
    if tag == "E":
        return Ellipsis
    if tag == "O":
        return OrderedDict(_dec_pairs(rest, handle))
    if tag == "C":
        return Counter(dict(_dec_pairs(rest, handle)))
    if tag == "dd":
        return defaultdict(_FACTORIES[rest[0]], _dec_pairs(rest[1:], handle))
    if tag == "q":
        maxlen = rest[0]
        if maxlen is not None:
            maxlen = _int(maxlen)
        return deque([_dec(x, handle) for x in rest[1:]], maxlen)
    if tag == "D":
        import decimal
        return decimal.Decimal(_str(rest[0]))
    if tag == "Q":
        import fractions
        return fractions.Fraction(_int(_dec(rest[0], handle)), _int(_dec(rest[1], handle)))
    if tag == "nt":
        return _nt_class(_str(rest[0]), tuple(map(_str, rest[1])))(*[_dec(x, handle) for x in rest[2:]])
    if tag == "na" or tag == "ns" or tag == "nO":
        return _np_dec(tag, rest, handle)
    if tag in ("td", "tz", "da", "ti", "dt"):
        return _dt_dec(tag, rest)
    if tag == "sub":
        return _carried(rest[0], _str(rest[1]), _dec(rest[2], handle), handle)
    return handle(n)


def _str(x):
    if type(x) is not str:
        raise ValueError("expected a string")
    return x


def _int(x):
    if type(x) is not int:
        raise ValueError("expected an int")
    return x


def _num(x):
    if type(x) is not float and type(x) is not int:
        raise ValueError("expected a number")
    return x


_NT = {}


def _nt_class(name, fields):
    key = (name, fields)
    if key not in _NT:
        _NT[key] = namedtuple(name, fields)  # validates the names: identifiers only, nothing to execute
    return _NT[key]


def _json_default(o):
    raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)


def _json_codec():
    # json's C core alone, set as json.dumps(separators=(",", ":")) and json.loads set theirs: importing
    # the json package (and the re and enum it imports) cost every run ~2 ms. The package where the core
    # is missing or takes other arguments (probed here, once).
    try:
        import _json

        class _Context:
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__
            memo = {}

        scan = _json.make_scanner(_Context())
        encode = _json.make_encoder(
            {}, _json_default, _json.encode_basestring_ascii, None, ":", ",", False, False, True
        )
        probe = ["a\u00e9", 1, -2.5, None, True, [float("inf")]]
        if "".join(encode(probe, 0)) != '["a\\u00e9",1,-2.5,null,true,[Infinity]]' or scan('[1,"x"]', 0) != ([1, "x"], 7):
            raise ValueError("json core differs")
    except Exception:
        import json

        return (lambda node: json.dumps(node, separators=(",", ":"))), json.loads

    def loads(text):
        try:
            value, end = scan(text, 0)
        except StopIteration:
            raise ValueError("not JSON") from None
        if end != len(text):
            raise ValueError("extra data after the JSON value")
        return value

    return (lambda node: "".join(encode(node, 0))), loads


_JSON_DUMPS, _JSON_LOADS = _json_codec()


def _dumps(node):
    return _JSON_DUMPS(node).encode("utf-8")


def _loads(data):
    return _JSON_LOADS(data.decode("utf-8"))

