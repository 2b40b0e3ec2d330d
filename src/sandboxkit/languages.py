"""How each language is written, compiled and run inside a command sandbox.

One table, shared by every backend that runs commands (subprocess, Docker, Daytona, E2B):
a backend writes ``source_name(code)`` into the workspace, runs ``compile`` (if any) under
the compile limits, then runs ``run``. Commands are argv lists relative to the workspace;
``{src}`` is the source file name and ``{bin}`` the compiled program.

Why a table rather than per-backend code: the commands must be identical wherever a
program runs, or the same completion could pass on one backend and fail on another.

Assertions and exit codes match Sandbox Fusion's runners (``sandbox/runners/major.py``), so a
test made of asserts gives the same verdict here and there:

* C / C++: compiled without ``-DNDEBUG``, so ``assert`` aborts (SIGABRT, a failed run).
* Java: run with ``-ea`` (asserts are off by default in the JVM; Sandbox Fusion turns them on).
* Rust: ``assert!`` always fires; ``debug_assert!`` and integer-overflow panics are on, as in
  Sandbox Fusion's plain (debug) ``rustc`` build, though the code is optimised.
* Go: no assert statement; a ``panic`` exits with code 2 (a failed run).
* JavaScript: ``require("assert")`` throws, and an uncaught exception exits with code 1.
  ``console.assert`` only prints, as in node everywhere.
* Bash: run as ``bash main.sh`` without ``set -e``, as Sandbox Fusion does: the exit code is the last
  command's, so a test must ``exit 1`` (or ``set -e`` itself) to fail.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from sandboxkit.errors import InvalidRequest

__all__ = [
    "LANGUAGES",
    "Language",
    "resolve_language",
    "sandbox_fusion_name",
]


def _java_source_name(code: str) -> str:
    # javac insists that a public class lives in a file of the same name.
    match = re.search(r"^\s*public\s+(?:final\s+|abstract\s+)*class\s+(\w+)", code, re.MULTILINE)
    return f"{match.group(1)}.java" if match else "Main.java"


def _java_run(code: str) -> list[str]:
    main = _java_source_name(code)[: -len(".java")]
    # The JVM reserves far more virtual memory than it uses, so it runs under a cgroup/rss
    # limit rather than RLIMIT_AS; -Xss keeps recursive solutions working; SerialGC and one
    # compiler thread keep start-up cheap on small CPU shares. -ea turns ``assert`` statements on, as
    # Sandbox Fusion's runner does: without it a Java test made of asserts passes every wrong solution.
    return [
        "java",
        "-ea",
        "-Xss64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:CICompilerCount=1",
        "-cp",
        ".",
        main,
    ]


@dataclass(frozen=True)
class Language:
    """One language's recipe.

    Attributes:
        name: canonical name used in requests and results.
        aliases: other names accepted on input (``python3``, ``nodejs``, ``c++``...).
        source: default source file name.
        run: argv that runs the program (``{src}`` / ``{bin}`` substituted).
        compile: argv of the compile step, or ``None`` for interpreted languages.
        binaries: executables that must exist for the language to work.
        package: Debian package that provides them (named in ToolchainMissing errors).
        sandbox_fusion: the name Sandbox Fusion uses for this language.
        virtual_memory_hungry: the runtime reserves large address space (JVM, Go, V8), so an
            RLIMIT_AS equal to the memory limit would kill it at start; limit RSS instead.
        env: extra environment the toolchain needs (caches pointed into the workspace).
    """

    name: str
    aliases: tuple[str, ...]
    source: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    binaries: tuple[str, ...] = ()
    package: str = ""
    sandbox_fusion: str = ""
    virtual_memory_hungry: bool = False
    env: dict[str, str] = field(default_factory=dict)
    source_name_fn: Callable[[str], str] | None = None
    run_fn: Callable[[str], list[str]] | None = None

    def source_name(self, code: str) -> str:
        """File name the code must be written to."""
        return self.source_name_fn(code) if self.source_name_fn else self.source

    def compile_argv(self, code: str) -> list[str] | None:
        """argv of the compile step for ``code``, or ``None`` if the language is interpreted."""
        if self.compile is None:
            return None
        src = self.source_name(code)
        return [part.format(src=src, bin="main") for part in self.compile]

    def run_argv(self, code: str, argv: list[str] | None = None) -> list[str]:
        """argv that runs ``code`` (after compiling, if the language compiles)."""
        base = (
            self.run_fn(code) if self.run_fn else [p.format(src=self.source_name(code), bin="main") for p in self.run]
        )
        return base + list(argv or [])

    def missing_binaries(self) -> list[str]:
        """Binaries of this language that are not on this machine's PATH."""
        return [b for b in self.binaries if shutil.which(b) is None]


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language(
            name="python",
            aliases=("python3", "py", "py3"),
            source="main.py",
            run=("python3", "-u", "{src}"),
            binaries=("python3",),
            package="python3-minimal",
            sandbox_fusion="python",
        ),
        Language(
            name="bash",
            aliases=("sh", "shell"),
            source="main.sh",
            run=("bash", "{src}"),
            binaries=("bash",),
            package="bash",
            sandbox_fusion="bash",
        ),
        Language(
            name="c",
            aliases=(),
            source="main.c",
            compile=("gcc", "-O2", "-std=gnu11", "-o", "{bin}", "{src}", "-lm"),
            run=("./{bin}",),
            binaries=("gcc",),
            package="gcc",
            sandbox_fusion="c",  # Sandbox Fusion has no 'c' runner upstream; kept for symmetry
        ),
        Language(
            name="cpp",
            aliases=("c++", "cxx", "cc"),
            source="main.cpp",
            compile=("g++", "-O2", "-std=gnu++17", "-o", "{bin}", "{src}"),
            run=("./{bin}",),
            binaries=("g++",),
            package="g++",
            sandbox_fusion="cpp",
        ),
        Language(
            name="javascript",
            aliases=("js", "node", "nodejs"),
            source="main.js",
            run=("node", "{src}"),
            binaries=("node",),
            package="nodejs",
            sandbox_fusion="nodejs",
            virtual_memory_hungry=True,
        ),
        Language(
            name="java",
            aliases=(),
            source="Main.java",
            compile=("javac", "-encoding", "UTF-8", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "{src}"),
            run=("java", "-ea", "Main"),
            binaries=("javac", "java"),
            package="default-jdk-headless",
            sandbox_fusion="java",
            virtual_memory_hungry=True,
            source_name_fn=_java_source_name,
            run_fn=_java_run,
        ),
        Language(
            name="rust",
            aliases=("rs",),
            source="main.rs",
            # Sandbox Fusion builds with plain ``rustc`` (a debug build): ``debug_assert!`` fires and integer
            # overflow panics. -O keeps the speed; the two -C flags keep those semantics, so a solution that
            # overflows fails here exactly as it does there.
            compile=(
                "rustc",
                "-O",
                "-C",
                "debug-assertions=on",
                "-C",
                "overflow-checks=on",
                "--edition",
                "2021",
                "-o",
                "{bin}",
                "{src}",
            ),
            run=("./{bin}",),
            binaries=("rustc",),
            package="rustc",
            sandbox_fusion="rust",
        ),
        Language(
            name="go",
            aliases=("golang",),
            source="main.go",
            compile=("go", "build", "-o", "{bin}", "{src}"),
            run=("./{bin}",),
            binaries=("go",),
            package="golang-go",
            sandbox_fusion="go",
            virtual_memory_hungry=True,
            env={"GOCACHE": ".cache/go-build", "GOPATH": ".cache/go", "GO111MODULE": "off", "CGO_ENABLED": "0"},
        ),
    )
}

_BY_ALIAS: dict[str, Language] = {}
for _lang in LANGUAGES.values():
    for _key in (_lang.name, *_lang.aliases, _lang.sandbox_fusion):
        _BY_ALIAS.setdefault(_key, _lang)


def resolve_language(name: str) -> Language:
    """Find a language by name or alias (case-insensitive).

    Raises:
        InvalidRequest: the name matches no language; the message lists the known ones.
    """
    lang = _BY_ALIAS.get(str(name).strip().lower())
    if lang is None:
        known = ", ".join(sorted(LANGUAGES))
        raise InvalidRequest(f"unknown language {name!r}; use one of: {known}")
    return lang


def sandbox_fusion_name(name: str) -> str:
    """Sandbox Fusion's name for a language (``javascript`` → ``nodejs``)."""
    return resolve_language(name).sandbox_fusion or resolve_language(name).name
