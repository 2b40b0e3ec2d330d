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


def _serve(base, spelled):
    # fd 3: requests from the checker; fd 4: replies. The solution's own output goes to /dev/null.
    # Only names the test spells (``spelled``, found by the host) can be looked up by it: the others
    # (a big precomputed table...) are not encoded at all.
    import operator
    _SUB["on"] = True
    ns = dict(base)
    try:
        exec(_CODE, ns)
        names = []
        for name, value in list(ns.items()):
            if name not in spelled or name.startswith("__") or (name in base and base[name] is value):
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
                given = [a for a in list(args) + list(kwargs.values()) if _mutable(a)]
            else:
                arg = _dec(arg, _solution_dec_handle)
                _REF["made"] = None
                given = [arg] if _mutable(arg) else []
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


class _Refused(BaseException):
    """The test compared (hashed, computed with) a value of the solution's that is not plain data."""


_STATE = {"cannot": None, "died": None, "refused": None}
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


def _refused(why):
    # The solution chose to return what cannot leave its process as data (an object, a generator, a
    # self-referencing or too deeply nested container): comparing it would let its own code decide, and
    # calling that "cannot isolate" (no reward) would let it dodge its zero. The case fails; a BaseException,
    # so the test's own ``except Exception`` cannot turn it into a pass.
    if _STATE["refused"] is None:
        _STATE["refused"] = why
    raise _Refused(why)


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
        if module is None and n[1] == "numpy":
            try:
                module = _numpy()  # by its fixed name: the test's np.array_equal runs here, not there
            except _NoNumpy:
                pass
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
        reply = _solution_reply("finished")
        if reply[0] == "x":
            raised = _remote_exception(reply[1])
        elif reply[0] == "r":
            _REF["sent"] = sent
            for mirror in reply[2]:
                _dec(mirror, _checker_handle)  # updates the test's own objects in place
            value = _dec(reply[1], _checker_handle)
        else:
            raise ValueError("unknown reply")
    except (_Cannot, _Died, _Refused):
        raise
    except _NoNumpy:
        _no_numpy()
    except BaseException as e:
        _died("the solution's process sent a malformed reply (%s)" % type(e).__name__)
    finally:
        _REF["sent"] = None
    if raised is not None:
        raise raised
    return value


def _refuse(what):
    def method(self, *args):
        _refused("the test %s a value of the solution's that is not plain data (an object, a generator, a "
                 "self-referencing or too deeply nested container): only the solution's own code could decide "
                 "that, so the case fails; return plain data" % what)
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


def _solution_reply(before):
    # The solution's next message (fd 5), decoded; its process ending first fails the case.
    raw = _recv(5)
    if raw is None:
        _died("the solution's process ended before the case " + before)
    return _loads(raw)


def _forward(op, with_argument):
    if with_argument:
        def method(self, argument):
            return _rpc(op, self._h, argument)
    else:
        def method(self):
            return _rpc(op, self._h, None)
    return method


# What the test may ask of a remote value: answered by the solution's process (see ``_rpc``).
for _name, _op, _with_argument in (
    ("__iter__", "iter", False), ("__next__", "next", False), ("__len__", "len", False),
    ("__bool__", "bool", False), ("__getitem__", "getitem", True), ("__str__", "str", False),
    ("__repr__", "repr", False), ("__format__", "format", True), ("__int__", "int", False),
    ("__float__", "float", False), ("__index__", "index", False), ("__instancecheck__", "isinstance", True),
    ("__subclasscheck__", "issubclass", True),
):
    setattr(_Remote, _name, _forward(_op, _with_argument))

# What it may not: only the solution's own code could decide them (see ``_refuse``).
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


def _no_numpy():
    if "numpy" in sys.modules and sys.modules["numpy"] is None:  # only the test can block it here
        _cannot("the test hides numpy from its own process, so a numpy value cannot be rebuilt in it")
    # numpy the checker cannot import from the paths the program cannot write: the solution's "numpy"
    # is not the sandbox's (a module it made or planted), so the value is the solution's to answer for.
    _refused("the solution returned a numpy value and numpy cannot be imported outside its process to "
             "rebuild it, so the case fails")


def _check(case):
    # A forked checker: fd 3 is the report to the parent.
    _write_all(3, _checked(case).encode("utf-8", "backslashreplace"))
    os._exit(0)


def _checked(case):
    # Runs the test; fd 4: requests to the solution, fd 5: its replies. Returns the payload for _verdict.
    code = case["code"]
    result = None
    try:
        first = _solution_reply("started")
        if first[0] == "F":
            raise _remote_exception(first[1])
        ns = dict(_BASE)
        for name, node in first[1]:
            # A name that shadows a builtin (``abs``, ``len``...) or rebinds a module of the prelude
            # (``math``...) stays the test's: in the solution's own process it would let the solution
            # replace the tools the test checks with (a fake ``math.isclose`` that is always true).
            if _str(name).startswith("__") or name in builtins.__dict__ or type(_BASE.get(name)) is type(sys):
                continue
            try:
                ns[name] = _dec(node, _checker_handle)
            except _NoNumpy:
                _no_numpy()
        # Compiled by the host (the same for every completion), and loaded only where this interpreter reads
        # that bytecode: a host on Python 3.12 grading in a sandbox's 3.11 sent bytecode that crashed the
        # checker, so a right answer failed. Elsewhere the test compiles here.
        magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", b"").hex()
        bc = case.get("bc") if case.get("magic") == magic else None
        test = marshal.loads(bytes.fromhex(bc)) if bc else compile(code, "<test>", "exec")
        exec(test, ns)
        result = "ok"
    except (_Cannot, _Died, _Refused):
        pass
    except BaseException as e:
        result = _failure(e, code)
    if _STATE["died"] is not None:
        result = "died\n" + _STATE["died"]
    elif _STATE["refused"] is not None:
        result = "err\n" + _STATE["refused"]
    elif _STATE["cannot"] is not None:
        result = "cannot\n" + _STATE["cannot"]
    elif result is None:
        result = "died\nthe solution's process stopped answering"
    return result
