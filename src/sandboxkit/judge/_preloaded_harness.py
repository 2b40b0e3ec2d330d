"""Harnesses a warm interpreter holds loaded (:meth:`sandboxkit.Backend.preload_python_module`).

A harness's definitions (functions, classes: most of its code) do not depend on the problem. Where the
sandbox's warm interpreter holds them as a module, loaded once before any program exists, a graded
program is only its data (``_D``) and a few lines that run the held module's per-run part in the
module's namespace: nothing to compile, unmarshal or define per run. Elsewhere the program carries the
whole harness, the same code. Shared by the plain harness (:mod:`sandboxkit.judge.harness`) and the
isolated one (:mod:`sandboxkit.judge.isolated`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from sandboxkit.base import Backend
from sandboxkit.judge._grading_state import Job, timed_run
from sandboxkit.models import Limits, RunResult

__all__ = ["NOLIB", "held_library", "held_module", "held_tail", "run_held"]

#: The line a program prints when its sandbox lacks the promised module (then nothing else ran).
NOLIB = "@@sandboxkit-nolib@@"


def held_library(prefix: str, definitions: str, runs: Mapping[str, str], filename: str) -> tuple[str, str]:
    """A harness as a module: ``(name, source)``, ``runs`` compiled once where it is loaded (``_RUNS``).

    The name is ``prefix`` and a digest of the source, so a fork server started by another sandboxkit
    version never lends its harness to this one. The runs are compiled as ``filename`` (the harness's
    frames are recognised by it and cut from reports), with ``optimize=2`` as the module itself.
    """
    entries = ", ".join(
        f"{key!r}: compile({text!r}, {filename!r}, 'exec', dont_inherit=True, optimize=2)" for key, text in runs.items()
    )
    source = definitions + "\n_RUNS = {" + entries + "}\n"
    return prefix + hashlib.sha256(source.encode("utf-8")).hexdigest()[:16], source


def held_module(backend: Backend, library: tuple[str, str]) -> str | None:
    """The library's module name if ``backend``'s warm interpreters hold it, else ``None``.

    A backend that cannot (the default), or that raises, gets programs carrying the whole harness.
    """
    name, source = library
    try:
        return name if backend.preload_python_module(name, source) else None
    except Exception:
        return None


def held_tail(module: str, run: str) -> str:
    """The program after ``_D``: run ``run`` of the held ``module``, or print :data:`NOLIB` without it."""
    return (
        "import sys as _s\n"
        f"_m = _s.modules.get({module!r})\n"
        "if _m is None:\n"
        f"    _s.stdout.write({NOLIB + chr(10)!r})\n"
        "else:\n"
        "    _m.__dict__['_D'] = _D\n"
        f"    exec(_m._RUNS[{run!r}], _m.__dict__)\n"
    )


async def run_held(
    job: Job, module: str | None, build: Callable[[str | None], tuple[str, str]], limits: Limits
) -> RunResult:
    """One sandbox run of the program ``build(module)`` makes (``(script, stdin)``), for either harness.

    ``module`` is the harness's name where the backend holds it (:func:`held_module`), else ``None``
    (the program carries the harness). A sandbox that lacks the promised module after all (an
    interpreter that could not load it) prints :data:`NOLIB` and nothing else (the harness never ran):
    the program is then run once more, carrying the harness.
    """
    while True:
        script, stdin = build(module)
        result = await timed_run(job, job.pool.run(script, language="python", stdin=stdin or None, limits=limits))
        if module is None or result.stdout != NOLIB + "\n":
            return result
        module = None
