_BASE = {"__name__": "__solution__", "__builtins__": builtins}
if _D["prelude"]:
    exec(compile(_D["prelude"], "<prelude>", "exec"), _BASE)
try:
    _CODE = compile(_D["source"], _SRC, "exec")
except (SyntaxError, ValueError) as _e:
    _report({"syntax_error": _exc_line(_e)})
    sys.exit(0)
