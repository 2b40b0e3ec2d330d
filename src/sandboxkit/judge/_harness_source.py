"""The source text of the Python per-case harness, in parts (see :mod:`sandboxkit.judge.harness` for why).

The harness is compiled by the sandbox's own interpreter on every run, so its size is paid on every
graded program: only the parts a problem needs are sent (the stdio child only when there are stdio
cases, the value encoder only when there are call cases). Every module it imports at the top is one a
warm fork server keeps loaded anyway (``os``, ``resource``, ``select``, ``signal``, ``sys``, ``time``);
``json`` only when there are call cases (return values are JSON-normalised), ``traceback`` only for
a stdio case's crash, ``hashlib`` only for a huge return value. Reports are ``repr`` lines the host
reads with ``ast.literal_eval``.

The parts are standalone Python (stdlib only): the sandbox cannot see sandboxkit's installation. Each
lives as a real file in :mod:`sandboxkit.judge._in_sandbox` (so ruff reads it and editors highlight
it) and is read from there once, at import: the text that reaches the sandbox is the file's text, with
the helpers every in-sandbox program shares (:mod:`sandboxkit._in_sandbox_std`) written in where a
part imports them (:func:`sandboxkit._standalone.standalone_source`).
"""

from __future__ import annotations

from pathlib import Path

from sandboxkit._standalone import standalone_source

__all__ = [
    "CALL",
    "CORE",
    "CORE_RUN",
    "FUNCTION",
    "INLINE",
    "INLINE_RUN",
    "MAIN",
    "NO_STDIO",
    "PROCESSES",
    "REPORTING",
    "RUN_VALUES",
    "SCHEDULING",
    "SOLUTION",
    "STDIO",
    "program_text",
]

_PARTS = Path(__file__).with_name("_in_sandbox")


def program_text(name: str) -> str:
    """The text of the harness part ``_in_sandbox/<name>.py``, as sent: after a newline, so parts join.

    A part is a file rather than a string literal so that it is linted and read as code; it is not
    imported on the host (most parts use names another part defines, see ``_in_sandbox``).
    """
    return "\n" + standalone_source(_PARTS / f"{name}.py")


#: The report channel's writer and an exception's one-line text, without importing traceback: shared
#: with the isolated harness.
REPORTING = program_text("reporting")

#: Killing a case's process (group) and reading how long it waited for a CPU: shared with the isolated
#: harness.
PROCESSES = program_text("processes")

#: Running many cases, at most so many at once, reporting each as it ends: shared with the isolated
#: harness, whose cases are a checker and a solution each (each harness says how a case starts and ends).
SCHEDULING = program_text("scheduling")

#: Set-up: data, report channel, prelude, compile once, limits, the scheduler. ``_D`` is prepended.
CORE = (
    "\nimport builtins, os, resource, select, signal, sys, time\n"
    + REPORTING
    + program_text("core_children")
    + PROCESSES
    + SCHEDULING
    + program_text("core_cases")
)

#: The run's report channel (a copy of stdout) and limits, first of every run. Shared with the isolated
#: harness.
RUN_VALUES = r"""
_OUT = os.dup(1)
_MARK = _D["mark"]
_CPU = _D["cpu"]
_WALL = _D["wall"]
"""

#: The solution's namespace with the prelude, and its code compiled once (a ``syntax_error`` report and
#: the end of the run if it does not compile). Shared with the isolated harness.
SOLUTION = program_text("solution")

#: The run's own set-up, after every definition: data, report channel, prelude, the solution compiled
#: once. Everything before it only defines (a warm fork server may hold it loaded: ``library``).
CORE_RUN = (
    RUN_VALUES
    + r"""
_CAP_IN = _D["value_cap"] + 65536
_ENC = getattr(sys.stdout, "encoding", None) or "utf-8"
_ERRORS = getattr(sys.stdout, "errors", None) or "strict"
"""
    + SOLUTION
)

#: Call cases: find the target, JSON-normalise the return value (a hash when it is large).
CALL = program_text("call_values")

#: Assert-only problems: no call encoder needed.
FUNCTION = r"""
def _call(ns, case):
    raise RuntimeError("no call cases in this problem")
"""

#: Stdio cases: the child behaves like ``python3 -u main.py < input``.
STDIO = program_text("stdio")

#: No stdio cases: stubs, so the core compiles.
NO_STDIO = program_text("no_stdio")

#: Run everything: in parallel when every case must run, then memory-killed cases alone.
MAIN = program_text("run_all")

#: One call/assert case, run in this process instead of a forked child (see ``harness.py``): the
#: child's fork and its copied pages were most of a single-case problem's cost. The payload and its
#: reading (``_run_case``, ``_verdict``) are the child's own, so the verdicts are the same; a death
#: the process cannot report (``os._exit``, a signal, SIGXCPU, an OOM kill) the host reads from the
#: run's exit, after the ``inline`` line says the case had started (SIGPROF or SIGXCPU: a timeout).
INLINE = program_text("inline")

#: The run of the only case, in this process (after ``INLINE``'s definitions and ``CORE_RUN``).
INLINE_RUN = program_text("inline_run")
