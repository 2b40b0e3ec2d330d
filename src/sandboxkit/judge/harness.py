"""The Python per-case harness: every case (call, assert, stdio) of one problem in ONE sandbox run.

Why: a sandbox run costs far more than a function call (process start, reset, network for
remote backends), so running ten cases as ten runs wastes ~90% of the time. But a naive
"loop over the cases in one process" lets one case's crash, ``sys.exit(0)`` or infinite loop
hide every other case, and lets the solution tamper with the loop that reports results.

How: the harness process (the *parent*) never runs model code. It compiles the solution once
(a ``SyntaxError`` becomes a ``compile_error``), runs the prelude once, then forks one *child* per
case from that prepared state, in its own process group, with only its own descriptors open (the
report channel and every other case's pipes are closed). For a call/assert case the child runs the
solution, then the case, with stdin/stdout/stderr on ``/dev/null``, and writes one JSON payload to a
private pipe. For a stdio case the child runs the solution as ``__main__`` with the case's input on
fd 0 (a memory file, sized like a redirected file) and its stdout/stderr on pipes, exactly like
``python3 -u main.py < input`` (exit code included). The parent waits on the children's pipes and
pidfds (no polling), kills each child's process group when it ends, and reports one JSON line per
case on its own stdout. So:

* an exception, ``sys.exit(...)``, ``os._exit(...)``, a segfault or a kill in the solution is a
  failed case (no payload = failure), never a pass, whatever the expected output is;
* **time is CPU time**: a case that uses more than ``timeout_s`` of CPU is a ``timeout`` (the kernel
  stops it with ``RLIMIT_CPU``; the parent checks the child's exact CPU use), so a loaded machine
  cannot turn a correct program into a timeout. A generous wall limit (:func:`wall_limit`) catches a
  case that sleeps or blocks. Later cases still run;
* when the shaping needs every case, cases run in parallel (up to the CPUs the sandbox may use);
  a case killed for memory while others ran is run again alone, so sharing the sandbox's memory
  never changes a verdict. With ``stop_on_error`` they run one at a time and stop at the first error;
* a call case's return value and a stdio case's output are sent back and compared *outside* the
  sandbox, so expected values never enter it and a program cannot forge a pass without producing
  the right value. (An assert case runs test code in the solution's own process, so it trusts that
  process, as every assert-based grader does.)

A problem with a single call or assert case is the exception: there is nothing to keep apart, so
the harness runs that case in its own process (:func:`runs_inline`), with the same verdicts.

Return values are JSON-normalised in the child (tuples become lists, sets sorted lists); a value
larger than :data:`VALUE_CAP` bytes is sent as a SHA-256 of its canonical JSON and compared by hash.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import marshal
import math
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.util import MAGIC_NUMBER
from typing import Any

from sandboxkit.base import Backend
from sandboxkit.judge import _harness_source as _source
from sandboxkit.judge._preloaded_harness import held_library, held_module, held_tail
from sandboxkit.judge.cases import AssertCase, CallCase, StdioCase

__all__ = [
    "DEFAULT_PARALLEL",
    "HARNESS_MODULES",
    "MARK",
    "VALUE_CAP",
    "WALL_STRETCH",
    "HarnessReport",
    "build_python_harness",
    "canonical_hash",
    "parse_harness_output",
    "prelude_for",
    "python_literal",
    "runs_inline",
    "wall_limit",
]

MARK = "@@sandboxkit-case@@ "
VALUE_CAP = 256 * 1024

#: Names LeetCode/APPS-style solutions use without importing them (``List[int]`` annotations,
#: ``defaultdict``...); verl's call wrapper star-imports the same kind of set.
PRELUDE = """\
from typing import *
import bisect, collections, functools, heapq, itertools, math, operator, random, re, string, sys
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, lru_cache, reduce
from heapq import heapify, heappop, heappush, heappushpop, heapreplace, nlargest, nsmallest
from itertools import accumulate, combinations, count, groupby, permutations, product
from bisect import bisect, bisect_left, bisect_right, insort
from math import ceil, comb, factorial, floor, gcd, inf, isqrt, log, log2, sqrt
"""

_LITERAL_MAX = 64 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _prelude_parts() -> list[tuple[str, frozenset[str]]]:
    """Each prelude statement with the names it binds, parsed from :data:`PRELUDE`."""
    parts: list[tuple[str, frozenset[str]]] = []
    for line in PRELUDE.splitlines():
        if line == "from typing import *":  # name by name: see prelude_for
            parts.extend((f"from typing import {n}", frozenset({n})) for n in typing.__all__)
        elif line.startswith("import "):
            parts.extend((f"import {m.strip()}", frozenset({m.strip()})) for m in line[7:].split(","))
        elif line.startswith("from "):
            module, _, names = line[5:].partition(" import ")
            parts.extend((f"from {module} import {n.strip()}", frozenset({n.strip()})) for n in names.split(","))
    return parts


_PRELUDE_PARTS = _prelude_parts()


def prelude_for(sources: Sequence[str]) -> str:
    """The prelude statements that bind a name the solution or its tests mention.

    Importing the whole prelude (typing, re, random...) costs a run ~10 ms of CPU when the sandbox's
    interpreter has not preloaded them; most solutions use none of it, or import what they use
    themselves. A name the code never spells cannot be looked up, so leaving its import out
    changes nothing the program can observe short of listing ``globals()``. For the same reason
    ``from typing import *`` becomes ``from typing import`` the names mentioned: binding all of
    ``typing``'s ~100 names writes to as many objects of the fork server's, each a copied page in a
    forked run (~0.3 ms of a HumanEval program's ~3.5 ms in the sandbox).
    """
    words = set()
    for text in sources:
        words.update(_IDENTIFIER.findall(text))
    chosen = [stmt for stmt, names in _PRELUDE_PARTS if names & words]
    typed = [stmt[len(_TYPING) :] for stmt in chosen if stmt.startswith(_TYPING)]
    rest = [stmt + "\n" for stmt in chosen if not stmt.startswith(_TYPING)]
    # typing first, as in PRELUDE: a later import (collections' Counter) rebinds a typing name
    return (_TYPING + ", ".join(typed) + "\n" if typed else "") + "".join(rest)


_TYPING = "from typing import "


#: Modules the harness and the prelude import. A warm fork server that preloads them (the subprocess
#: backend's default ``preload_modules`` should include them) makes the harness cost no import at all;
#: without that the harness is still correct, only each run pays the imports.
HARNESS_MODULES = (
    "bisect",
    "builtins",
    "collections",
    "functools",
    "hashlib",
    "heapq",
    "io",
    "itertools",
    "json",
    "math",
    "operator",
    "os",
    "random",
    "re",
    "resource",
    "select",
    "signal",
    "string",
    "sys",
    "time",
    "traceback",
    "typing",
)

#: Cases of one problem run at once (when the shaping needs every case), capped by the CPUs the
#: sandbox may use: per-case CPU-time limits keep the verdicts the same whatever the contention.
DEFAULT_PARALLEL = 8


#: Waiting for a CPU stretches a case's wall limit, up to this many times the limit.
WALL_STRETCH = 10.0


def wall_limit(timeout_s: float) -> float:
    """A case's wall-clock limit: generous, because its CPU time is what the time limit measures.

    A busy loop is stopped by its CPU time (``timeout_s``) however loaded the machine is; the wall
    limit only catches a case that sleeps or blocks without using CPU. Time the case spends waiting
    for a CPU (the kernel's run-queue wait, ``/proc/PID/schedstat``) extends it, up to
    :data:`WALL_STRETCH` times, so a busy machine cannot turn a slow-but-correct case into a timeout.
    """
    return 2.0 * timeout_s + 1.0


def build_python_harness(
    source: str,
    cases: Sequence[StdioCase | AssertCase | CallCase],
    *,
    timeout_s: float,
    output_bytes: int = 1 << 20,
    stop_on_error: bool = False,
    prelude: bool = True,
    parallel: int = DEFAULT_PARALLEL,
    inline: bool | None = None,
    module: str | None = None,
) -> str:
    """The Python program that runs ``cases`` against ``source``, one forked child per case.

    Args:
        source: the solution's code.
        cases: the cases; results refer to them by position.
        timeout_s: each case's CPU-time limit (its wall-clock limit is :func:`wall_limit`).
        output_bytes: cap on each stream of a stdio case (past it: ``output_limit``).
        stop_on_error: run the cases one at a time and stop after the first that raises, crashes,
            exits non-zero or times out (wrong answers are judged outside the sandbox, so they never
            stop it).
        prelude: pre-import the names LeetCode-style solutions assume (``List``, ``defaultdict``...)
            for call and assert cases; stdio cases run as a plain ``__main__`` script.
        parallel: most cases run at once when ``stop_on_error`` is off (also capped by the CPUs the
            sandbox may use).
        inline: run the case in the harness process itself, not in a forked child (see
            :func:`runs_inline`); ``None`` (the default) does so exactly when that is allowed.
        module: the name under which the sandbox's warm interpreter holds the harness's definitions
            (:func:`warm_module`): the program is then ``_D`` and a few lines, and prints ``NOLIB``
            should the module be missing; ``None``: the program carries the harness.
    """
    items: list[dict[str, Any]] = []
    for case in cases:
        if isinstance(case, CallCase):
            items.append({"kind": "call", "fn": case.fn_name, "args": case.args, "kwargs": case.kwargs})
        elif isinstance(case, StdioCase):
            items.append({"kind": "stdio", "stdin": case.stdin})
        else:
            items.append({"kind": "assert", "code": case.code})
    kinds = {item["kind"] for item in items}
    if inline is None:
        inline = runs_inline(cases)
    elif inline and not runs_inline(cases):
        raise ValueError("only a problem with a single call or assert case can run it inline")
    data = {
        "source": source,
        "cases": items,
        "cpu": float(timeout_s),
        "wall": wall_limit(float(timeout_s)),
        "stretch": WALL_STRETCH,
        "output_bytes": int(output_bytes),
        "stop_on_error": stop_on_error,
        "parallel": max(1, int(parallel)),
        "prelude": prelude_for([source, *(i.get("code", "") for i in items)]) if prelude and kinds - {"stdio"} else "",
        "mark": MARK,
        "value_cap": VALUE_CAP,
    }
    try:
        json.dumps(data, allow_nan=False)  # C speed: only non-finite floats need the slow path
        literal = repr(data)  # JSON-like data without inf/nan: repr is a Python literal
    except ValueError:
        literal = python_literal(data)
    if len(literal) > _LITERAL_MAX:
        # Compiling a huge literal costs more than parsing JSON: big inputs pay the json import instead.
        literal = "__import__('json').loads(" + repr(json.dumps(data)) + ")"
    if module is not None:
        return "_D = " + literal + "\n" + held_tail(module, "inline" if inline else "main")
    parts = (
        _source.CORE,
        _source.CALL if "call" in kinds else _source.FUNCTION,
        "" if inline else _source.STDIO if "stdio" in kinds else _source.NO_STDIO,
        _source.CORE_RUN,
        _source.INLINE + _source.INLINE_RUN if inline else _source.MAIN,
    )
    return "_D = " + literal + "\n" + _loader(parts, _NOT_INLINE if inline else frozenset())


@functools.lru_cache(maxsize=1)
def library() -> tuple[str, str]:
    """The harness's definitions, every shape's, as a module for warm interpreters: ``(name, source)``.

    One module for all shapes: the call encoder and the stdio child are only ever called for call and
    stdio cases, so a problem without them runs the same code as the program's lighter stubs would.
    """
    definitions = _source.CORE + _source.CALL + _source.STDIO + _source.INLINE
    runs = {"inline": _source.CORE_RUN + _source.INLINE_RUN, "main": _source.CORE_RUN + _source.MAIN}
    return held_library("_sandboxkit_harness_", definitions, runs, HARNESS_FILE)


def warm_module(backend: Backend) -> str | None:
    """The plain harness's module name if ``backend``'s warm interpreters hold it, else ``None``."""
    return held_module(backend, library())


@functools.lru_cache(maxsize=16)
def _loader(parts: tuple[str, ...], drop: frozenset[str]) -> str:
    """The script's constant tail: runs the harness made of ``parts`` (less ``drop``) on ``_D``."""
    source, bytecode = _compiled(parts, drop)
    # Compiling the harness's ~10 KB costs a freshly forked interpreter ~4 ms, half of a warm run: ship
    # it compiled (marshal) when the sandbox's interpreter reads this bytecode (same magic number, the
    # test the import system itself uses for .pyc files), else the source. Hex, not base64: decoding
    # base64 imports ``binascii`` (a shared library, ~0.35 ms of a fresh process's time), while
    # ``bytes.fromhex`` is built in; the longer literal costs the compiler less than that.
    return (
        "import sys as _sys\n"
        f"if getattr(_sys.modules.get('_frozen_importlib_external'), 'MAGIC_NUMBER', None) == {MAGIC_NUMBER!r}:\n"
        f"    exec(__import__('marshal').loads(bytes.fromhex({bytecode!r})))\n"
        "else:\n"
        f"    exec(compile({source!r}, {HARNESS_FILE!r}, 'exec'))\n"
    )


def runs_inline(cases: Sequence[StdioCase | AssertCase | CallCase]) -> bool:
    """Whether the harness runs the problem's only case in its own process instead of a forked child.

    A child per case exists to keep cases apart (one case's crash, ``sys.exit`` or loop cannot hide
    another's result); with a single call or assert case there is nothing to keep apart, and the
    second fork (with the pages it copies) was most of such a problem's cost in the sandbox. The
    program still runs in a fresh sandbox process of its own, with the same verdicts: the payload
    and its reading are the child's, CPU time is limited by ``RLIMIT_CPU``, the wall limit by a
    timer; a death the process cannot report is read from the run's exit
    (:func:`sandboxkit.judge._harness_run.inline_lost`). A stdio case keeps its child: it runs as
    ``__main__`` with its own exit code and streams.
    """
    return len(cases) == 1 and not isinstance(cases[0], StdioCase)


#: The harness's own file name in tracebacks (never shown: its frames are cut from every report).
HARNESS_FILE = "<sandboxkit-harness>"


#: The harness's functions that only the forked-child scheduler calls: left out of an inline harness,
#: whose size every run pays (the compiler reads its bytecode's literal, ``marshal`` builds it).
_FORK_ONLY = frozenset(
    {
        "_write_all",
        "_enter_child",
        "_kill",
        "_pidfd",
        "_start",
        "_finish",
        "_schedule",
        "_run_cases",
        "_poll",
        "_child_function",
    }
)
#: ... and those the inline harness does without (it reads its one case's end itself).
_NOT_INLINE = _FORK_ONLY | {"_Case", "_cpu_s", "_verdict"}


def without_definitions(source: str, names: frozenset[str]) -> str:
    """``source`` less its top-level functions and classes called ``names`` (a harness ships only what
    its shape runs: every code object costs each run its unmarshalling and the pages it touches)."""
    if not names:
        return source
    lines = source.splitlines(keepends=True)
    cut: set[int] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            cut.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return "".join(line for i, line in enumerate(lines) if i not in cut)


@functools.lru_cache(maxsize=16)
def _compiled(parts: tuple[str, ...], drop: frozenset[str]) -> tuple[str, str]:
    """The harness made of ``parts`` less the top-level functions named in ``drop``, and its bytecode
    for this interpreter as hex (computed once)."""
    source = without_definitions("".join(parts), drop)
    return source, marshal.dumps(compile(source, HARNESS_FILE, "exec")).hex()


@dataclass
class HarnessReport:
    """What the harness said.

    Attributes:
        syntax_error: the compiler's message when the solution does not compile.
        results: case position -> ``{"status": "ok"|"error"|"timeout"|"memory_exceeded"|"output_limit", "t", ...}``;
            call cases add ``value`` (``{"json"}`` or ``{"sha256", "size"}``), failures ``error``, stdio cases
            ``code``, ``signal``, ``stdout`` and the tail of ``stderr``.
        finished: the harness reached its end (``False``: it was killed mid-way, e.g. by the run's limits
            or by the solution killing its parent).
        inline: the position of the case the harness started in its own process, if any.
    """

    syntax_error: str | None = None
    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False
    inline: int | None = None


def python_literal(value: Any) -> str:
    """``value`` (JSON-like data) as Python source the harness evaluates without importing ``json``.

    ``repr`` is a literal for every JSON type but non-finite floats, which become ``float('inf')``.

    Raises:
        TypeError: a value that is not JSON-like (the test parser never produces one).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_literal(str(k))}: {python_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"the harness cannot carry a {type(value).__name__}: {value!r:.60}")


_FIXED: dict[str, dict[str, Any]] = {repr(item): item for item in ({"done": True}, {"inline": 0})}


def parse_harness_output(stdout: str) -> HarnessReport:
    """Read the harness's report lines; anything else on stdout is ignored."""
    report = HarnessReport()
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        text = line[len(MARK) :]
        if text in _FIXED:  # the lines every run sends, read without compiling them
            item = _FIXED[text]
        else:
            try:
                item = ast.literal_eval(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
        if not isinstance(item, dict):
            continue
        if "syntax_error" in item:
            report.syntax_error = str(item["syntax_error"])
            report.finished = True
        elif item.get("done"):
            report.finished = True
        elif isinstance(item.get("inline"), int):
            report.inline = item["inline"]
        elif isinstance(item.get("i"), int):
            report.results[item["i"]] = item
    return report


def canonical_hash(value: Any) -> str:
    """SHA-256 of a value's canonical JSON, as the harness computes it for large return values."""
    try:
        canon = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except TypeError:
        canon = json.dumps(value, separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()
