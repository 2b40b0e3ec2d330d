"""Part of the isolated assert harness's source: the framing and the value encoding (see
:mod:`sandboxkit.judge._harness_isolated` for the encoding, :mod:`sandboxkit.judge.isolated` for why).

Standalone Python text, compiled with the rest of the harness in the sandbox; the tests run it alone
(after :data:`~sandboxkit.judge._harness_isolated.IMPORTS`) to check that values come back exactly.
"""

from __future__ import annotations

__all__ = ["CODEC"]

#: Framing and the value encoding, shared by the checker and the solution (standalone: tests run it).
CODEC = r"""
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
_MUTABLE_TAGS = {"l", "d", "s", "B", "q", "O", "dd", "C"}


def _enc(o, other):
    t = type(o)
    if t in _MUTABLE:
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
    return other(o)


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
    if t is list or t is bytearray:
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


def _dumps(node):
    return json.dumps(node, separators=(",", ":")).encode("utf-8")


def _loads(data):
    return json.loads(data.decode("utf-8"))

"""
