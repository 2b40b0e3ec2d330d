"""Assert cases whose test code runs in a process the solution never controls (``isolate_asserts``).

Why: the plain harness runs an assert case's test code in the solution's own process, so the
solution can forge the result: write the harness's success payload to the result pipe and
``os._exit(0)``, return an object whose ``__eq__`` is always true, or patch ``AssertionError``. In
RL a policy learns such forgeries (a reward the sandbox got wrong). Call cases are safe without this
(their return values are compared on the host); assert cases need the split.

How (the program is :data:`sandboxkit.judge._harness_isolated.SOURCE`): per case a *checker* process
runs the trusted test code and a *solution* process runs the model's code. The solution's names are
proxies in the checker: a call sends the arguments and gets the return value back as data (a tagged
JSON the checker decodes without executing anything), so every ``==``, ``<`` and ``in`` of the test
runs in the checker, on real builtin values. Arguments changed in place are mirrored back; builtin
exceptions (and stand-ins for the solution's own exception classes, with the same builtin bases)
are raised in the checker, so ``except ValueError`` works. The checker and the harness parent are
non-dumpable (no ptrace, no ``/proc/PID/mem`` or ``/proc/PID/fd``) and the solution holds no
descriptor but its two request pipes; only the checker holds the report pipe.

What cannot be carried as data (an object, a generator, a self-referencing or too deeply nested
container) stays in the solution process as a handle: the checker may call it, read its attributes,
iterate it, take its ``len``/``bool``/``str``, but the moment the test asks it to compare, hash or
compute (which would let the solution's code decide the outcome) the case **fails** (``error``, "not
plain data"): the solution chose to return it, and reading that as "cannot isolate" (no reward) let a
wrong solution dodge its zero. :class:`CannotIsolate` (an infrastructure error, reward ``None``) is left
for what the solution cannot cause: the test hands the solution something that is not data (a
lambda), the test hides numpy from itself, or the sandbox cannot make the checker non-dumpable. Out of
scope: a solution that reads the test's source from its own memory (it is a
fork of the harness, which holds every case) to compute the expected answers.

A problem's only case needs no forked checker: the harness process is its checker (:func:`runs_inline`).
Cases are scheduled as in the plain harness: in parallel when the shaping needs every case (a case
killed for memory while others ran is run again alone), one at a time stopping at the first failure
otherwise; each has the plain harness's CPU-time limit (the checker's and the solution's CPU summed)
and its stretched wall limit.
"""

from __future__ import annotations

import ast
import base64
import functools
import json
import marshal
import re
import sys
import types
import warnings
import zlib
from collections.abc import Sequence
from importlib.util import MAGIC_NUMBER
from typing import Any

from sandboxkit.base import Backend
from sandboxkit.errors import SandboxError
from sandboxkit.judge._grading_state import Job, Outcome, all_compile_error
from sandboxkit.judge._harness_isolated import INLINE_SOURCE, LIBRARY, RUN_INLINE, RUN_MANY, SOURCE
from sandboxkit.judge._harness_run import inline_lost, timeout_result
from sandboxkit.judge._preloaded_harness import held_library, held_module, held_tail, run_held
from sandboxkit.judge.cases import AssertCase
from sandboxkit.judge.harness import (
    DEFAULT_PARALLEL,
    MARK,
    WALL_STRETCH,
    prelude_for,
    python_literal,
    wall_limit,
    without_definitions,
)
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.models import RunResult, Status

__all__ = [
    "CannotIsolate",
    "build_isolated_harness",
    "imports_of",
    "isolated_program",
    "parse_isolated_output",
    "run_isolated_asserts",
]

#: The isolated harness's own file name in tracebacks (never shown: its frames are cut from reports).
HARNESS_FILE = "<sandboxkit-isolated-harness>"

#: A harness run's own time budget never exceeds a day.
_MAX_RUN_S = 24 * 3600.0


class CannotIsolate(SandboxError):
    """An assert case could not be kept out of the solution's process, for a reason the solution cannot cause.

    The test passed the solution something that is not data (a lambda, a generator of its own), the
    test hid numpy from its own process, or the sandbox cannot make the checker non-dumpable. Grading it
    in-process would let the solution's own code decide, so the verdict is an infrastructure error
    (reward ``None``): grade such tests without ``isolate_asserts``, or make them pass plain data. (A
    test comparing a value the *solution* returned that is not data fails the case instead.)
    """

    kind = "cannot_isolate"


def imports_of(code: str) -> list[str]:
    """Modules the test code imports, so the harness imports them before any solution code exists."""
    return list(_imports_of(code))


@functools.lru_cache(maxsize=1024)
def _imports_of(code: str) -> tuple[str, ...]:
    # Cached: parsing a HumanEval test costs ~0.3 ms, and RL grades many completions against one test.
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return ()
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return tuple(sorted(set(names)))


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1024)
def spelled(code: str) -> tuple[str, ...]:
    """The names the test code uses: only those of the solution's names cross to the checker.

    The solution process sees this list, so it holds names only, never what the test's strings say
    (``assert f(1) == "right answer"`` must not hand the solution ``right`` and ``answer``): the names of
    the compiled test's code objects (globals, attributes, imports), found here, not in the sandbox. A
    solution's name the test reaches only through a string (``eval("f(1)")``) is not carried. A test
    that does not compile has no case to run: every identifier it spells is listed.
    """
    compiled = _compiled_test(code)
    if compiled is None:
        return tuple(sorted(set(_IDENTIFIER.findall(code))))
    names: set[str] = set()
    stack = [compiled]
    while stack:
        unit = stack.pop()
        names.update(unit.co_names)
        stack.extend(c for c in unit.co_consts if isinstance(c, types.CodeType))
    return tuple(sorted(names))


def _case_data(code: str) -> dict[str, Any]:
    data: dict[str, Any] = {"code": code, "names": spelled(code)}
    bytecode = _test_bytecode(code)
    if bytecode is not None:
        data["bc"] = bytecode
        data["magic"] = MAGIC_NUMBER.hex()  # whose bytecode it is: the sandbox's Python may be another version
    return data


@functools.lru_cache(maxsize=1024)
def _test_record(code: str) -> str:
    """A case's code and bytecode as the JSON record the harness reads from stdin (ASCII: its length in
    characters is its length in bytes). Cached: RL grades many completions against one test."""
    return json.dumps({k: v for k, v in _case_data(code).items() if k != "names"})


@functools.lru_cache(maxsize=1024)
def _test_bytecode(code: str) -> str | None:
    """The test code compiled here, in hex, for a sandbox interpreter that reads this bytecode.

    Compiling a HumanEval test in the sandbox cost every run ~0.3 ms; RL grades many completions
    against one test, so here it is compiled once. As the sandbox would: ``<test>`` as its file name
    (case messages quote its lines), asserts kept whatever this interpreter's ``-O``, no ``__future__``
    flag of this module. ``None`` when it does not compile: the sandbox compiles it and reports why.
    """
    compiled = _compiled_test(code)
    return marshal.dumps(compiled).hex() if compiled is not None else None


@functools.lru_cache(maxsize=1024)
def _compiled_test(code: str) -> types.CodeType | None:
    """The test compiled as the sandbox compiles it (once per test: its bytecode and its names)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a SyntaxWarning is the sandbox's to print, not the host's
            return compile(code, "<test>", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return None


def build_isolated_harness(source: str, cases: Sequence[AssertCase], **options: Any) -> str:
    """The Python program that runs assert ``cases`` against ``source`` with the tests carried in it.

    For running the program by hand (stdin stays free); the judge sends the tests on stdin instead,
    out of the solution's reach (:func:`isolated_program`, which takes the same ``options``).
    """
    return isolated_program(source, cases, tests_on_stdin=False, **options)[0]


def isolated_program(
    source: str,
    cases: Sequence[AssertCase],
    *,
    timeout_s: float,
    stop_on_error: bool = False,
    prelude: bool = True,
    parallel: int = DEFAULT_PARALLEL,
    module: str | None = None,
    tests_on_stdin: bool = True,
) -> tuple[str, str]:
    """The program that runs assert ``cases`` against ``source`` with the test code isolated, and its stdin.

    Why the tests go on stdin (``tests_on_stdin``): every solution process is a fork of the harness, so
    tests in the program (``_D``) are in the solution's memory, where a solution can find the expected
    answers (reproduced: a wrong solution that searched its memory got reward 1.0). On stdin, the
    harness moves them into a memory file without reading them (``splice``), and a checker reads its
    case only after the solution it checks exists. The program keeps only what is no secret: the
    identifiers each test uses as names.

    Args:
        source: the solution's code.
        cases: the assert cases; results refer to them by position.
        timeout_s: each case's CPU-time limit (the checker's and the solution's, summed).
        stop_on_error: stop after the first case that does not pass.
        prelude: pre-import the names LeetCode-style solutions assume (as the plain harness does).
        parallel: most cases run at once when ``stop_on_error`` is off (also capped by the CPUs the
            sandbox may use); a case killed for memory while others ran is run again alone.
        module: the name under which the sandbox's warm interpreter holds the harness's definitions
            (:func:`warm_module`): the program is then ``_D`` and a few lines, and prints ``NOLIB``
            should the module be missing; ``None``: the program carries the whole harness.
        tests_on_stdin: send the tests on stdin (``False``: in the program, stdin ``""``).
    """
    codes = [case.code for case in cases]
    tests: list[dict[str, Any]] = []
    records: list[str] = []
    at = 0
    for code in codes:
        if tests_on_stdin:
            record = _test_record(code)
            tests.append({"names": spelled(code), "at": at, "len": len(record)})
            records.append(record)
            at += len(record)
        else:
            tests.append(_case_data(code))
    stdin = "".join(records)
    data = {
        "source": source,
        "cases": tests,
        "imports": sorted({name for code in codes for name in _imports_of(code)}),
        "cpu": float(timeout_s),
        "wall": wall_limit(float(timeout_s)),
        "stretch": WALL_STRETCH,
        "stop_on_error": stop_on_error,
        "parallel": max(1, int(parallel)),
        "prelude": prelude_for([source, *codes]) if prelude else "",
        "mark": MARK,
    }
    try:
        json.dumps(data, allow_nan=False)
        literal = repr(data)
    except ValueError:
        literal = python_literal(data)
    inline = runs_inline(cases)
    tail = held_tail(module, "inline" if inline else "many") if module is not None else _loader(inline)
    return "_D = " + literal + "\n" + tail, stdin


@functools.lru_cache(maxsize=1)
def library() -> tuple[str, str]:
    """The harness's definitions as a module for warm interpreters: ``(name, source)`` (see ``_preloaded_harness``)."""
    return held_library("_sandboxkit_isolated_", LIBRARY, {"many": RUN_MANY, "inline": RUN_INLINE}, HARNESS_FILE)


def warm_module(backend: Backend) -> str | None:
    """The harness module's name if ``backend``'s warm interpreters hold it, else ``None``.

    Saves each run compiling the ~40 KB harness and defining its ~80 functions (about 2.5 ms of a
    HumanEval problem's CPU). A backend that cannot (or raises) gets the whole harness in the program.
    """
    return held_module(backend, library())


@functools.lru_cache(maxsize=2)
def _loader(inline: bool) -> str:
    """The script's constant tail (built once: repr of its ~100 KB costs ~0.3 ms).

    The harness goes compiled when the sandbox's interpreter reads this bytecode (the magic number test
    the import system uses for ``.pyc`` files), in hex as the plain harness's: base64 would import
    ``binascii``, a shared library in some builds, and ``bytes.fromhex`` is built in. Any other
    interpreter compiles the source, shipped zlib-compressed: every character of the script costs the
    compiler's tokenizer (and the transfer into the sandbox) time in every run, even in the branch
    that does not run, and the source would add ~30 KB to the ~110 KB of hex.
    """
    source, bytecode = _compiled(inline)
    packed = base64.b64encode(zlib.compress(source.encode("utf-8"), 9)).decode("ascii")
    return (
        "import sys as _sys\n"
        f"if getattr(_sys.modules.get('_frozen_importlib_external'), 'MAGIC_NUMBER', None) == {MAGIC_NUMBER!r}:\n"
        f"    exec(__import__('marshal').loads(bytes.fromhex({bytecode!r})))\n"
        "else:\n"
        "    for _c in _D['cases']:\n"
        "        _c.pop('bc', None)\n"
        f"    _z = __import__('zlib').decompress(__import__('binascii').a2b_base64({packed!r}))\n"
        f"    exec(compile(_z.decode('utf-8'), {HARNESS_FILE!r}, 'exec'))\n"
    )


def runs_inline(cases: Sequence[AssertCase]) -> bool:
    """Whether the harness process itself is the checker of the problem's only case.

    A forked checker per case keeps the cases apart (one case's crash or loop cannot hide another's
    result). With one case there is nothing to keep apart: the harness process, which runs no model
    code, is non-dumpable and alone holds the report channel, runs the test itself and forks only the
    solution. One fork and one process less per run (most of an isolated HumanEval problem's cost),
    with the same verdicts, limits and security: the solution is still a process of its own that can
    neither trace the checker nor reach its descriptors. A death of the harness process itself (its
    CPU backstop, the OOM killer, a kill by the solution) is read from the run's exit, as for the
    plain harness's inline case (:func:`sandboxkit.judge._harness_run.inline_lost`).
    """
    return len(cases) == 1


#: The functions only forked checkers use, left out of the inline harness (every code object costs each
#: run its unmarshalling and the pages it touches).
_FORKED_ONLY = frozenset({"_check"})


@functools.lru_cache(maxsize=2)
def _compiled(inline: bool) -> tuple[str, str]:
    """The harness's source for this shape and its bytecode for this interpreter in hex (computed once).

    Compiled with ``optimize=2``: the harness's own docstrings are not shipped (it has no ``assert`` and
    reads no ``__debug__``; the test code is compiled in the sandbox with the interpreter's own flags).
    """
    source = without_definitions(INLINE_SOURCE, _FORKED_ONLY) if inline else SOURCE
    return source, marshal.dumps(_lines_only(compile(source, HARNESS_FILE, "exec", optimize=2))).hex()


def _lines_only(code: types.CodeType) -> types.CodeType:
    """``code`` with a location table of its functions' first lines only (3.11+; others: unchanged).

    Every run tokenizes the harness's hex and unmarshals it (~15 ns a character): the column table was
    a fifth of the bytecode, and a harness frame is never shown (:func:`parse_isolated_output` reads
    only the harness's reports; the test's and solution's frames are compiled elsewhere, their
    lines intact). A valid table, not an empty one: ``traceback`` walks it should a frame be printed.
    """
    if sys.version_info < (3, 11):
        return code
    consts = tuple(_lines_only(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    units = len(code.co_code) // 2
    table = bytearray()
    while units > 0:  # entries of up to 8 code units: kind 13 (line, no columns), line delta 0
        step = min(units, 8)
        table += bytes((0x80 | (13 << 3) | (step - 1), 0))
        units -= step
    return code.replace(co_linetable=bytes(table), co_consts=consts)


def parse_isolated_output(stdout: str) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The harness's run-wide items (``syntax_error``, ``cannot``, ``done``) and its per-case items."""
    header: dict[str, Any] = {}
    results: dict[int, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            item = ast.literal_eval(line[len(MARK) :])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("i"), int):
            results[item["i"]] = item
        else:
            header.update(item)
    return header, results


async def run_isolated_asserts(job: Job, group: list[tuple[int, AssertCase]]) -> Outcome:
    """Run a Python problem's assert cases in one sandbox run of the isolated harness.

    Raises:
        CannotIsolate: a case needed a value that cannot leave the solution's process (see the class).
    """
    cases = [case for _, case in group]
    budget = min(_MAX_RUN_S, len(group) * (3 * wall_limit(job.limits.timeout_s) + 0.5) + 5.0)
    output = max(job.limits.output_bytes, len(group) * 2048 + 65536)
    limits = job.limits.merged(timeout_s=budget, output_bytes=output)

    def build(module: str | None) -> tuple[str, str]:
        return isolated_program(job.code, cases, timeout_s=job.limits.timeout_s, stop_on_error=job.stop, module=module)

    result = await run_held(job, warm_module(job.pool.backend), build, limits)
    header, results = parse_isolated_output(result.stdout)
    if "syntax_error" in header:
        return all_compile_error(group, trim_message(str(header["syntax_error"]).splitlines()[-1]))
    if "cannot" in header:
        raise CannotIsolate(str(header["cannot"]))
    outcome = Outcome()
    stopped = False
    for k, (index, case) in enumerate(group):
        item = results.get(k)
        if item is None:
            if len(group) == 1:  # its checker was the harness process: read the run's own exit
                outcome.cases[index] = inline_lost(index, case, result, job.limits.timeout_s)
            elif not stopped:
                outcome.cases[index] = _lost(index, case, result)
            continue
        if item.get("status") == "cannot_isolate":
            raise CannotIsolate(f"assert case {index}: {item.get('error')}")
        outcome.cases[index] = _case_result(index, case, item, job.limits.timeout_s)
        stopped = stopped or (job.stop and not outcome.cases[index].passed)
    return outcome


def _case_result(index: int, case: AssertCase, item: dict[str, Any], time_limit: float) -> CaseResult:
    elapsed = float(item.get("t", 0.0))
    status = item.get("status")
    if status == "ok":
        return CaseResult(index=index, type=case.type, status="passed", time_s=elapsed)
    if status == "timeout":
        return timeout_result(index, case.type, item, time_limit)
    message = trim_message(str(item.get("error") or "the case failed"))
    kind = "memory_exceeded" if status == "memory_exceeded" else "error"
    return CaseResult(index=index, type=case.type, status=kind, time_s=elapsed, message=message)


def _lost(index: int, case: AssertCase, result: RunResult) -> CaseResult:
    # The harness died before reporting this case (the solution killed it, or the run's limits did).
    status = {Status.TIMEOUT: "timeout", Status.MEMORY_EXCEEDED: "memory_exceeded"}.get(result.status, "error")
    tail = trim_message(result.stderr.strip().splitlines()[-1]) if result.stderr.strip() else ""
    message = f"the harness stopped before this case ({result.status.value}{': ' + tail if tail else ''})"
    return CaseResult(index=index, type=case.type, status=status, message=trim_message(message))  # type: ignore[arg-type]
