"""The source text of the isolated assert harness (see :mod:`sandboxkit.judge.isolated` for why).

Three processes per case, all forked from a harness parent that turned itself non-dumpable before
any model code existed:

* the **solution** process runs the model's code and then serves requests on two pipes (fd 3 in,
  fd 4 out): call this handle, read that attribute, iterate... It holds no other descriptor.
* the **checker** process runs the (trusted) test code. The names the solution defined are proxies
  there: calling one sends the arguments, and receives the return value as *data* (tagged JSON that
  ``json.loads`` reads without executing anything), so ``==`` in the test compares real builtin
  values in the checker, never an object the solution controls. Arguments the solution mutated in
  place are mirrored back. The checker alone holds the report pipe to the parent (fd 3).
* the parent forks both per case, waits for the checker's payload, and reports it on its stdout.

The value encoding, used both ways: a JSON scalar (``null``, ``true``/``false``, a number, a string)
is itself; every JSON array is a tagged node ``[tag, ...]``: ``l`` list, ``t`` tuple, ``s`` set, ``f``
frozenset, ``d`` dict (keys and values alternating), ``I`` a big int in hex, ``b``/``B``
bytes/bytearray (latin-1), ``c`` complex, ``r`` range, ``E`` Ellipsis, ``D`` Decimal, ``Q`` Fraction,
``O`` OrderedDict, ``dd`` defaultdict, ``C`` Counter, ``q`` deque, ``nt`` namedtuple, ``h`` a handle
(an object that stays in the solution process), ``X`` an exception class, ``M`` a module. Types are
matched exactly (``type(v) is list``), so a subclass with its own ``__eq__`` is a handle, not data.

This string is standalone Python (stdlib only): the sandbox cannot see sandboxkit's installation.
``_D`` (the data) is prepended.
"""

from __future__ import annotations

__all__ = ["CODEC", "IMPORTS", "SOURCE"]

#: The modules every part below uses.
IMPORTS = r"""
import builtins, fcntl, json, os, resource, select, signal, sys, time
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
"""

_HEAD = r"""
_OUT = os.dup(1)
_MARK = _D["mark"]
_SRC = "main.py"
_CPU = _D["cpu"]
_WALL = _D["wall"]


def _report(obj):
    _write_all(_OUT, (_MARK + repr(obj) + "\n").encode("utf-8"))


def _exc_line(e):
    name = type(e).__qualname__
    module = getattr(type(e), "__module__", "builtins")
    if module not in ("__main__", "builtins"):
        name = "%s.%s" % (module, name)
    try:
        text = str(e)
    except BaseException:
        text = "<exception str() failed>"
    return "%s: %s" % (name, text) if text else name


def _where(exc, code):
    last = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in (_SRC, "<test>"):
            last = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if last is None:
        return ""
    where = " (%s line %d)" % last
    if last[0] == "<test>":
        lines = code.splitlines()
        if 0 < last[1] <= len(lines):
            where += ": " + lines[last[1] - 1].strip()[:120]
    return where


def _failure(e, code):
    # The payload for an exception that ended the solution's set-up or the test, as the plain harness words it.
    if isinstance(e, SystemExit):
        return "err\nthe program called sys.exit(%r) before the case finished" % (e.code,)
    told = getattr(e, "_sk_msg", None)
    if isinstance(e, MemoryError):
        return "oom\n" + (told or "MemoryError" + _where(e, code))
    if told:
        return "err\n" + told
    lines = _exc_line(e).strip().splitlines() or [type(e).__name__]
    return "err\n" + lines[-1] + _where(e, code)


def _no_dump():
    # Non-dumpable: a process of the same uid cannot ptrace it, read its memory or open /proc/PID/fd.
    # Every checker and solution is forked from here, so the checker never is dumpable.
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except BaseException:
        return False

"""

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

_PROCESSES = r'''
# ---------------------------------------------------------------- the solution process


_HANDLES = {}
_HANDLE_IDS = {}


def _handle(o):
    # An object that stays here; the checker gets its number. The table keeps it alive for the case.
    hid = _HANDLE_IDS.get(id(o))
    if hid is None:
        hid = len(_HANDLES)
        _HANDLES[hid] = o
        _HANDLE_IDS[id(o)] = hid
    return hid


def _solution_other(o):
    if isinstance(o, type) and issubclass(o, BaseException):
        bases = [_solution_other(b) for b in o.__bases__ if isinstance(b, type) and issubclass(b, BaseException)]
        return ["X", _handle(o), str(getattr(o, "__module__", "")), str(getattr(o, "__qualname__", "Error")), bases]
    if type(o) is type(sys):
        return ["M", str(getattr(o, "__name__", "")), _handle(o)]
    return ["h", _handle(o)]


def _solution_enc(o):
    try:
        return _enc(o, _solution_other)
    except RecursionError:
        return ["h", _handle(o)]


def _solution_dec_handle(n):
    if n[0] == "h" and type(n[1]) is int and n[1] in _HANDLES:
        return _HANDLES[n[1]]
    raise ValueError("unknown handle")


def _exception_node(e):
    try:
        args = _solution_enc(list(e.args))
    except BaseException:
        args = ["l"]
    if isinstance(e, SystemExit):
        message = ""
    elif isinstance(e, MemoryError):
        message = "MemoryError" + _where(e, "")
    else:
        lines = _exc_line(e).strip().splitlines() or [type(e).__name__]
        message = lines[-1] + _where(e, "")
    return [_solution_other(type(e)), args, message]


def _serve(base):
    # fd 3: requests from the checker; fd 4: replies. The solution's own output goes to /dev/null.
    import operator
    ns = dict(base)
    try:
        exec(_CODE, ns)
        names = []
        for name, value in list(ns.items()):
            if name.startswith("__") or (name in base and base[name] is value):
                continue
            names.append([name, _solution_enc(value)])
        reply = ["n", names]
    except BaseException as e:
        reply = ["F", _exception_node(e)]
    _send(4, _dumps(reply))
    if reply[0] == "F":
        return
    while True:
        raw = _recv(3)
        if raw is None:
            return
        op, hid, arg = _loads(raw)
        mirrors = []
        _REF["made"] = made = []
        try:
            obj = _HANDLES[hid]
            if op == "call":
                args = _dec(arg[0], _solution_dec_handle)
                kwargs = _dec(arg[1], _solution_dec_handle)
                _REF["made"] = None
                value = obj(*args, **kwargs)
                given = [a for a in list(args) + list(kwargs.values()) if type(a) in _MUTABLE]
            else:
                arg = _dec(arg, _solution_dec_handle)
                _REF["made"] = None
                given = [arg] if type(arg) in _MUTABLE else []
                if op == "attr":
                    value = getattr(obj, arg)
                elif op == "setattr":
                    value = setattr(obj, arg[0], arg[1])
                elif op == "iter":
                    value = iter(obj)
                elif op == "next":
                    value = next(obj)
                elif op == "len":
                    value = len(obj)
                elif op == "bool":
                    value = bool(obj)
                elif op == "getitem":
                    value = obj[arg]
                elif op == "str":
                    value = str(obj)
                elif op == "repr":
                    value = repr(obj)
                elif op == "format":
                    value = format(obj, arg)
                elif op == "int":
                    value = int(obj)
                elif op == "float":
                    value = float(obj)
                elif op == "index":
                    value = operator.index(obj)
                elif op == "isinstance":
                    value = isinstance(arg, obj)
                elif op == "issubclass":
                    value = issubclass(arg, obj)
                else:
                    raise TypeError("unknown request %r" % (op,))
            _REF["ids"] = {id(m): k for k, m in enumerate(made)}
            try:
                mirrors = [_solution_enc(a) for a in given]
                reply = ["r", _solution_enc(value), mirrors]
            finally:
                _REF["ids"] = None
        except BaseException as e:
            _REF["made"] = None
            reply = ["x", _exception_node(e)]
        _send(4, _dumps(reply))


# ---------------------------------------------------------------- the checker process


class _Cannot(BaseException):
    """The test used a value that cannot be carried out of the solution's process as data."""


class _Died(BaseException):
    """The solution's process ended (or sent garbage) while the test still needed it."""


_STATE = {"cannot": None, "died": None}
_REMOTES = {}
_EXC_CLASSES = {}


def _cannot(why):
    if _STATE["cannot"] is None:
        _STATE["cannot"] = why
    raise _Cannot(why)


def _died(why):
    if _STATE["died"] is None:
        _STATE["died"] = why
    raise _Died(why)


def _checker_other(o):
    if type(o) is _Remote:
        return ["h", object.__getattribute__(o, "_h")]
    _cannot("the test passes a %s to the solution, which cannot be sent to its process as data" % type(o).__name__)


def _exc_class(n):
    # ["X", hid, module, qualname, bases]: the builtin (or already imported) class itself, else a local
    # stand-in with the same builtin bases, so `except ValueError` and `except TheirError` both work.
    hid, module, qual, bases = n[1], _str(n[2]), _str(n[3]), n[4]
    if hid in _EXC_CLASSES:
        return _EXC_CLASSES[hid]
    found = None
    if module == "builtins":
        found = getattr(builtins, qual, None)
    elif module in sys.modules and module != "__main__" and "." not in qual and "<" not in qual:
        found = getattr(sys.modules[module], qual, None)  # a library's class (``__main__`` is this harness)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        parents = tuple(_exc_class(b) for b in bases if type(b) is list and b and b[0] == "X") or (Exception,)
        name = qual.rpartition(".")[2] or "Error"
        try:
            found = type(name, parents, {"__module__": module, "__qualname__": qual})
        except TypeError:
            found = type(name, parents[:1], {"__module__": module, "__qualname__": qual})
    _EXC_CLASSES[hid] = found
    return found


def _checker_handle(n):
    tag = n[0]
    if tag == "X":
        return _exc_class(n)
    if tag == "M":
        module = sys.modules.get(_str(n[1]))
        if module is not None:
            return module
        n = ["h", n[2]]
    if tag == "h" and type(n[1]) is int:
        remote = _REMOTES.get(n[1])
        if remote is None:
            remote = _REMOTES[n[1]] = _Remote(n[1])
        return remote
    raise ValueError("unknown tag %r" % (tag,))


def _remote_exception(node):
    cls = _checker_handle(node[0])
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise ValueError("not an exception class")
    args = tuple(_dec(node[1], _checker_handle))
    try:
        e = cls(*args)
    except Exception:
        e = cls.__new__(cls, *args)
        e.args = args
    if node[2]:
        e._sk_msg = _str(node[2])
    return e


def _rpc(op, hid, arg):
    if _STATE["died"] is not None:
        raise _Died(_STATE["died"])
    _REF["sent"] = sent = []
    try:
        if op == "call":
            args, kwargs = arg
            node = [_enc(list(args), _checker_other), _enc(dict(kwargs), _checker_other)]
        else:
            node = _enc(arg, _checker_other)
    finally:
        _REF["sent"] = None
    _send(4, _dumps([op, hid, node]))
    raised = None
    try:
        raw = _recv(5)
        if raw is None:
            _died("the solution's process ended before the case finished")
        reply = _loads(raw)
        if reply[0] == "x":
            raised = _remote_exception(reply[1])
        elif reply[0] == "r":
            _REF["sent"] = sent
            for mirror in reply[2]:
                _dec(mirror, _checker_handle)  # updates the test's own objects in place
            value = _dec(reply[1], _checker_handle)
        else:
            raise ValueError("unknown reply")
    except (_Cannot, _Died):
        raise
    except BaseException as e:
        _died("the solution's process sent a malformed reply (%s)" % type(e).__name__)
    finally:
        _REF["sent"] = None
    if raised is not None:
        raise raised
    return value


def _refuse(what):
    def method(self, *args):
        _cannot("the test %s an object of the solution's (not plain data): only the solution's own code "
                "could decide that, and it cannot be trusted to" % what)
    return method


class _Remote:
    """An object living in the solution's process: calls and reads go there and return data."""

    __slots__ = ("_h",)

    def __init__(self, h):
        object.__setattr__(self, "_h", h)

    def __call__(self, *args, **kwargs):
        return _rpc("call", self._h, (args, kwargs))

    def __getattr__(self, name):
        if name[:2] == "__" and name not in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
            raise AttributeError(name)
        return _rpc("attr", self._h, name)

    def __setattr__(self, name, value):
        _rpc("setattr", self._h, (name, value))

    def __iter__(self):
        return _rpc("iter", self._h, None)

    def __next__(self):
        return _rpc("next", self._h, None)

    def __len__(self):
        return _rpc("len", self._h, None)

    def __bool__(self):
        return _rpc("bool", self._h, None)

    def __getitem__(self, key):
        return _rpc("getitem", self._h, key)

    def __str__(self):
        return _rpc("str", self._h, None)

    def __repr__(self):
        return _rpc("repr", self._h, None)

    def __format__(self, spec):
        return _rpc("format", self._h, spec)

    def __int__(self):
        return _rpc("int", self._h, None)

    def __float__(self):
        return _rpc("float", self._h, None)

    def __index__(self):
        return _rpc("index", self._h, None)

    def __instancecheck__(self, obj):
        return _rpc("isinstance", self._h, obj)

    def __subclasscheck__(self, cls):
        return _rpc("issubclass", self._h, cls)


for _name, _what in (
    ("__eq__", "compares"), ("__ne__", "compares"), ("__lt__", "orders"), ("__le__", "orders"),
    ("__gt__", "orders"), ("__ge__", "orders"), ("__hash__", "hashes"), ("__contains__", "searches"),
    ("__add__", "computes with"), ("__radd__", "computes with"), ("__sub__", "computes with"),
    ("__rsub__", "computes with"), ("__mul__", "computes with"), ("__rmul__", "computes with"),
    ("__truediv__", "computes with"), ("__floordiv__", "computes with"), ("__mod__", "computes with"),
    ("__pow__", "computes with"), ("__neg__", "computes with"), ("__abs__", "computes with"),
    ("__and__", "computes with"), ("__or__", "computes with"), ("__xor__", "computes with"),
    ("__round__", "computes with"), ("__reduce__", "copies"), ("__reduce_ex__", "copies"),
    ("__copy__", "copies"), ("__deepcopy__", "copies"), ("__setitem__", "changes"), ("__delitem__", "changes"),
    ("__delattr__", "changes"), ("__enter__", "enters"),
):
    setattr(_Remote, _name, _refuse(_what))


def _check(case):
    # fd 3: the report to the parent; fd 4: requests to the solution; fd 5: its replies.
    code = case["code"]
    result = None
    try:
        raw = _recv(5)
        if raw is None:
            _died("the solution's process ended before the case started")
        first = _loads(raw)
        if first[0] == "F":
            raise _remote_exception(first[1])
        ns = dict(_BASE)
        for name, node in first[1]:
            # A name that shadows a builtin (``abs``, ``len``...) or rebinds a module of the prelude
            # (``math``...) stays the test's: in the solution's own process it would let the solution
            # replace the tools the test checks with (a fake ``math.isclose`` that is always true).
            if _str(name).startswith("__") or name in builtins.__dict__ or type(_BASE.get(name)) is type(sys):
                continue
            ns[name] = _dec(node, _checker_handle)
        test = compile(code, "<test>", "exec")
        exec(test, ns)
        result = "ok"
    except (_Cannot, _Died):
        pass
    except BaseException as e:
        result = _failure(e, code)
    if _STATE["died"] is not None:
        result = "died\n" + _STATE["died"]
    elif _STATE["cannot"] is not None:
        result = "cannot\n" + _STATE["cannot"]
    elif result is None:
        result = "died\nthe solution's process stopped answering"
    _write_all(3, result.encode("utf-8", "backslashreplace"))
    os._exit(0)


# ---------------------------------------------------------------- the parent


def _enter(keep):
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    # Copies above every target first, so moving one into place never overwrites another still to move.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, len(keep)) for fd in keep]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(keep), 1 << 16)
    soft = max(1, -int(-_CPU // 1))
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    except (ValueError, OSError):
        pass


def _kill(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _queued_s(pid):
    try:
        with open("/proc/%d/schedstat" % pid, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _fork(keep, body):
    pid = os.fork()
    if pid == 0:
        try:
            _enter(keep)
            body()
        finally:
            os._exit(70)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    return pid


class _Run:
    """One case in flight: its two processes, the checker's report pipe, its deadline."""


def _start(i, case):
    r = _Run()
    r.i, r.case, r.data, r.size = i, case, [], 0
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    r.res_r, res_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    r.started = time.monotonic()
    r.deadline = r.started + _WALL
    r.sol = _fork([null, null, null, req_r, resp_w], lambda: _serve(_BASE))
    r.chk = _fork([null, null, null, res_w, req_w, resp_r], lambda: _check(case))
    for fd in (req_r, req_w, resp_r, resp_w, res_w, null):
        os.close(fd)
    return r


def _finish(r, killed):
    os.close(r.res_r)
    if killed:
        _kill(r.chk)
    _, c_status, c_usage = os.wait4(r.chk, 0)
    _kill(r.sol)
    _, s_status, s_usage = os.wait4(r.sol, 0)
    cpu = c_usage.ru_utime + c_usage.ru_stime + s_usage.ru_utime + s_usage.ru_stime
    payload = b"".join(r.data).decode("utf-8", "replace")
    return _verdict(r.i, time.monotonic() - r.started, cpu, killed, c_status, s_status, payload)


def _schedule(cases, parallel, stop):
    # Runs every case (at most ``parallel`` at once), reporting each as it ends; stops starting new
    # ones after a failure when ``stop``. Returns the cases a memory kill hit while others ran.
    pending = list(cases)
    running = []
    retry = []
    failed = False
    while pending or running:
        while pending and len(running) < parallel and not (stop and failed):
            running.append(_start(*pending.pop(0)))
        if not running:
            break
        wait = max(0.0, min(r.deadline for r in running) - time.monotonic())
        ready = select.select([r.res_r for r in running], [], [], wait)[0]
        for r in list(running):
            done = killed = False
            if r.res_r in ready:
                chunk = os.read(r.res_r, 65536)
                if not chunk:
                    done = True
                elif r.size < 65536:
                    r.data.append(chunk)
                    r.size += len(chunk)
            now = time.monotonic()
            if not done and now >= r.deadline:
                # Time spent waiting for a CPU does not count against the wall limit (as in the plain harness).
                stretched = min(r.started + _WALL + _queued_s(r.chk) + _queued_s(r.sol), r.started + _WALL * _D["stretch"])
                if now < stretched:
                    r.deadline = stretched
                else:
                    done = killed = True
            if not done:
                continue
            running.remove(r)
            res = _finish(r, killed)
            if res["status"] == "memory_exceeded" and parallel > 1:
                retry.append((r.i, r.case))  # memory is shared by the cases running together: judge it alone
                continue
            _report(res)
            failed = failed or res["status"] != "ok"
    return retry


def _signal(status):
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None


def _verdict(i, elapsed, cpu, killed, c_status, s_status, payload):
    base = {"i": i, "t": elapsed, "cpu": cpu}
    c_sig, s_sig = _signal(c_status), _signal(s_status)
    c_code = os.WEXITSTATUS(c_status) if os.WIFEXITED(c_status) else None
    if killed or cpu > _CPU or signal.SIGXCPU in (c_sig, s_sig):
        return dict(base, status="timeout", why="wall" if killed and cpu <= _CPU else "cpu")
    kind, _, body = payload.partition("\n")
    if c_code == 0 and kind == "ok":
        return dict(base, status="ok")
    if c_code == 0 and kind == "cannot":
        return dict(base, status="cannot_isolate", error=body[:500])
    if c_code == 0 and kind == "died":
        if s_sig == signal.SIGKILL:  # before the test ended, so not ours: the kernel's OOM killer
            return dict(base, status="memory_exceeded", error="killed by SIGKILL (out of memory)")
        if s_sig is not None:
            return dict(base, status="error", error="the program was killed by signal %d before the case finished" % s_sig)
        if os.WIFEXITED(s_status) and body.startswith("the solution's process ended"):
            return dict(base, status="error", error="the program exited (code %d) before the case finished" % os.WEXITSTATUS(s_status))
        return dict(base, status="error", error=body[:500])
    if c_code == 0 and kind in ("err", "oom"):
        return dict(base, status="memory_exceeded" if kind == "oom" else "error", error=body[:500])
    if c_sig == signal.SIGKILL:
        return dict(base, status="memory_exceeded", error="killed by SIGKILL (out of memory)")
    why = "signal %d" % c_sig if c_sig is not None else "code %s" % c_code
    return dict(base, status="error", error="the test's process ended (%s) before the case finished" % why)


# ---------------------------------------------------------------- set-up and main


# Only directories the program cannot write stay importable: the checker imports modules after the
# solution has run, and a module planted in the workspace must not load into it.
_STDLIB = {os.path.dirname(os.__file__), os.path.dirname(getattr(select, "__file__", "") or os.__file__)}
sys.path[:] = [
    p for p in sys.path
    if p in _STDLIB or (p and os.path.isabs(p) and not os.access(p if os.path.isdir(p) else os.path.dirname(p), os.W_OK))
]
sys.path_importer_cache.clear()
if not _no_dump():
    _report({"cannot": "the harness cannot make itself non-dumpable (prctl is unavailable), so the test "
                       "could not be kept out of the solution's reach"})
    sys.exit(0)
for _m in _D["imports"]:
    try:
        __import__(_m)
    except BaseException:
        pass
_BASE = {"__name__": "__solution__", "__builtins__": builtins}
if _D["prelude"]:
    exec(compile(_D["prelude"], "<prelude>", "exec"), _BASE)
try:
    _CODE = compile(_D["source"], _SRC, "exec")
except (SyntaxError, ValueError) as _e:
    _report({"syntax_error": _exc_line(_e)})
    sys.exit(0)
_cases = list(enumerate(_D["cases"]))
_stop = _D["stop_on_error"]
try:
    _cpus = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    _cpus = os.cpu_count() or 1
_parallel = 1 if _stop else max(1, min(len(_cases), _D["parallel"], _cpus))
for _item in _schedule(_cases, _parallel, _stop):
    _schedule([_item], 1, False)
_report({"done": True})
'''

SOURCE = IMPORTS + _HEAD + CODEC + _PROCESSES
