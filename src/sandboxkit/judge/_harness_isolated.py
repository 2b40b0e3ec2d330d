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
``O`` OrderedDict, ``dd`` defaultdict, ``C`` Counter, ``q`` deque, ``nt`` namedtuple, ``ns``/``na``
a numpy scalar/array (dtype name, shape, raw bytes in base64), ``nO`` an object-dtype array (its
elements as values), ``da``/``dt``/``ti``/``td``/``tz`` a datetime date/datetime/time/timedelta/
fixed-offset timezone (their fields), ``h`` a handle (an object that stays in the solution process), ``X`` an exception
class, ``M`` a module. Types are matched exactly (``type(v) is list``); an instance of a subclass of
one of them (an ``int`` with its own ``__eq__``, an ``IntEnum`` member) is encoded as its base value,
read with the base type's own methods, so the subclass's code never decides a comparison: from the
checker as that value alone, from the solution as ``sub`` (its handle, its class's name, the value),
which the checker rebuilds as a local subclass of the base that reads added attributes via the handle.

This string is standalone Python (stdlib only): the sandbox cannot see sandboxkit's installation.
``_D`` (the data) is prepended.
"""

from __future__ import annotations

from sandboxkit.judge._harness_source import PROCESSES, REPORTING, RUN_VALUES, SCHEDULING, SOLUTION, program_text

__all__ = ["CODEC", "IMPORTS", "INLINE_SOURCE", "LIBRARY", "RUN_INLINE", "RUN_MANY", "SOURCE"]

#: Framing and the value encoding, shared by the checker and the solution (standalone: tests run it
#: alone, after :data:`IMPORTS`, to check that values come back exactly).
CODEC = program_text("isolated_codec")

#: The solution process (serves requests) and the checker process (runs the test code on proxies).
ROLES = program_text("isolated_roles")

#: The modules every part below uses.
IMPORTS = r"""
import builtins, marshal, os, resource, select, signal, sys, time
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
"""

_HEAD = REPORTING + program_text("isolated_head")

#: The import path the checker keeps: the directories of ``sys.path`` the program cannot write. Found
#: where the definitions are loaded: a warm fork server (whose path never held the workspace), or the run.
_PATHS = r"""
_STDLIB = {os.path.dirname(os.__file__), os.path.dirname(getattr(select, "__file__", "") or os.__file__)}
_SAFE_PATH = frozenset(
    p for p in sys.path
    if p in _STDLIB or (p and os.path.isabs(p) and not os.access(p if os.path.isdir(p) else os.path.dirname(p), os.W_OK))
)
"""

#: Where the tests' code is: on stdin, moved into a memory file without passing through this process.
_TESTS = program_text("isolated_tests")

#: The parent's tools: forking a process, reading how a case ended.
_PARENT = program_text("isolated_parent") + PROCESSES + program_text("isolated_children")

#: Many cases: a forked checker and a forked solution per case, scheduled (some at once).
_SCHEDULER = SCHEDULING + program_text("isolated_scheduler")

#: Set-up, before any model code exists: the run's own values, import path, non-dumpable, the test's
#: imports, the prelude. Everything from here on is the run's; everything before it only defines (a fork
#: server may hold it loaded: see ``LIBRARY``).
_SETUP = RUN_VALUES + program_text("isolated_setup") + SOLUTION

#: Runs the cases with the scheduler and says it is done.
_MAIN = program_text("isolated_run_all")

#: A problem's only case: this process is its checker (see :func:`sandboxkit.judge.isolated.runs_inline`).
_INLINE_DEFS = program_text("isolated_inline")

#: Runs a problem's only case with the harness process as its checker.
_INLINE_RUN = program_text("isolated_inline_run")

#: The harness for many cases (forked checkers), as one text (:mod:`sandboxkit.judge.isolated` ships it
#: compiled).
SOURCE = IMPORTS + _HEAD + _PATHS + CODEC + _TESTS + ROLES + _PARENT + _SCHEDULER + _SETUP + _MAIN

#: The harness for a problem's only case (its checker is the harness process itself, less ``_check``).
INLINE_SOURCE = IMPORTS + _HEAD + _PATHS + CODEC + _TESTS + ROLES + _PARENT + _INLINE_DEFS + _SETUP + _INLINE_RUN

#: Both harnesses' definitions, which read nothing of a run (no ``_D``): what a warm fork server can hold
#: loaded (:meth:`sandboxkit.Backend.preload_python_module`), so that a run only executes ``RUN_MANY`` or
#: ``RUN_INLINE`` in that module's namespace.
LIBRARY = IMPORTS + _HEAD + _PATHS + CODEC + _TESTS + ROLES + _PARENT + _SCHEDULER + _INLINE_DEFS

#: The run of many cases, and of a problem's only case, after ``LIBRARY`` (and ``_D``).
RUN_MANY = _SETUP + _MAIN
RUN_INLINE = _SETUP + _INLINE_RUN
