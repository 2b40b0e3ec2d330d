"""Compile-then-run, planned once for every backend that runs commands (subprocess, Docker).

A run is at most two steps: the compile step of a compiled language (under
``limits.compile_timeout_s``; a failure is the run's ``compile_error``) and the run step (under
``limits.timeout_s``, with stdin). Which argv each has, and whether Python may take the fast
path (the code run inside an already started interpreter instead of a new ``python3``), is the
language's business, so it is decided here and nowhere else; a backend executes the steps with
its own machinery and its own per-step limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import RunRequest

__all__ = ["Plan", "Step", "plan", "warm_python_ok"]


@dataclass(frozen=True)
class Step:
    """One process of a run.

    Attributes:
        argv: what to start (also for the fast path: the argv a cold interpreter would get).
        timeout_s: its wall-clock limit.
        compiler: a compile step (a failure is a ``compile_error``; no stdin).
        python_script: the fast path: run this workspace file inside a warm interpreter, with
            ``python_args`` as ``sys.argv[1:]``; None: start ``argv``.
        python_args: the program's own arguments on the fast path.
    """

    argv: list[str]
    timeout_s: float
    compiler: bool = False
    python_script: str | None = None
    python_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A run worked out: the language, the source file to write, and its steps.

    Attributes:
        language: the resolved language.
        source_name: the file the code is written to, relative to the workspace.
        source: the text written there (the code, or what the language makes of it).
        compile: the compile step, or None for an interpreted language.
        run: the run step.
    """

    language: Language
    source_name: str
    source: str
    compile: Step | None
    run: Step

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps in order (compile first, when there is one)."""
        return (self.run,) if self.compile is None else (self.compile, self.run)


def warm_python_ok(language: Language, env: Mapping[str, str]) -> bool:
    """Whether a program of ``language`` may run in a warm interpreter: Python, and no ``PYTHON*`` variable.

    Interpreter options passed through the environment (``PYTHONHASHSEED``, ``PYTHONPATH``, ...)
    are read when an interpreter starts, so a warm one would ignore them: such a run starts cold.
    """
    return language.name == "python" and not any(key.startswith("PYTHON") for key in env)


def plan(request: RunRequest, *, warm_python: bool) -> Plan:
    """The steps of ``request``; ``warm_python``: the backend has a warm interpreter and it is switched on.

    Raises:
        InvalidRequest: the request's language is unknown.
    """
    language = resolve_language(request.language)
    code, limits = request.code, request.limits
    compile_argv, run_argv = language.project_argvs(code, request.files, request.argv)
    compile_step = None if compile_argv is None else Step(compile_argv, limits.compile_timeout_s, compiler=True)
    source_name, source = language.source_name(code), language.prepare(code)
    project = language.project_fn is not None and language.project_fn(request.files) is not None
    if project and source_name in request.files:
        # A project build (cuda's CMake project) uses the request's files as they are and, like Sandbox
        # Fusion, writes ``code`` nowhere: the file of the source's name keeps its own text.
        source_name, source = _kept(source_name, request.files[source_name])
    fast = warm_python and warm_python_ok(language, request.env)
    run = Step(
        run_argv,
        limits.timeout_s,
        python_script=source_name if fast else None,
        python_args=tuple(request.argv) if fast else (),
    )
    return Plan(language, source_name, source, compile_step, run)


def _kept(name: str, content: bytes) -> tuple[str, str]:
    """Write ``content`` back to ``name`` (a no-op), or, where it is not text, the code to a name no build reads."""
    try:
        return name, content.decode("utf-8")
    except UnicodeDecodeError:
        return ".sandboxkit-unused-code.txt", ""
