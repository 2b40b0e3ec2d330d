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

import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Collection
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
        JAVA_CLASSPATH,
        main,
    ]


#: Where ``scripts/bootstrap.sh`` installs the pinned npm packages sandboxed programs may use (lodash, tsx,
#: jest...); the Docker image carries the same tree at the same path. Node finds them through NODE_PATH.
NODE_PREFIX = "/usr/local/lib/sandboxkit/node"
NODE_MODULES = f"{NODE_PREFIX}/node_modules"
#: ``exec node "$@"``, installed with the tree: typescript and jest start through it, so an image or host without
#: the tree has no such command (ToolchainMissing on every backend) instead of a run that fails on a missing module.
NODE_BIN = f"{NODE_PREFIX}/bin/node"
#: javatuples, which Sandbox Fusion puts on every Java program's classpath (``-cp .:javatuples-1.2.jar``), from
#: Debian's ``libjavatuples-java``. A missing jar is no error for javac or java (only a program importing it fails),
#: so Java does not require it; ``sandboxkit doctor --strict`` proves it is there.
JAVATUPLES_JAR = "/usr/share/java/javatuples.jar"
JAVA_CLASSPATH = f".:{JAVATUPLES_JAR}"
#: Where ``scripts/toolchains.sh`` builds the offline Go module cache (testify and what it needs, from Debian's
#: Go source packages): ``mod/`` is the ``GOMODCACHE``, and ``go.work`` names a template module whose ``go.mod``
#: requires them. Sandbox Fusion builds each Go program inside such a module (its ``runtime/go``); here the
#: program's build joins the template through ``GOWORK``, so the workspace needs no ``go.mod`` and the command
#: stays ``go build`` / ``go test``. ``GOPROXY=off``: nothing is fetched, a module the cache lacks is an error.
GO_PREFIX = "/usr/local/lib/sandboxkit/go"
GO_WORK = f"{GO_PREFIX}/go.work"
_GO_ENV = {
    "GOCACHE": ".cache/go-build",
    # `go test` builds its test binary in a temporary directory and runs it from there; a sandbox's /tmp may be
    # mounted noexec (Docker's is), so it goes into the workspace itself, the one directory sure to exist when go
    # starts (go creates its work directory there, ``go-build<n>``, and removes it when it ends).
    "GOTMPDIR": "./",
    "GOPATH": ".cache/go",
    "GOWORK": GO_WORK,
    "GOMODCACHE": f"{GO_PREFIX}/mod",
    "GOPROXY": "off",
    "GOSUMDB": "off",
    "GOFLAGS": "-mod=readonly",
    "GOTOOLCHAIN": "local",
    "CGO_ENABLED": "0",
}
_GO_INSTALL = "apt-get install golang-go, then bash scripts/bootstrap.sh --all (it builds the offline module cache)"
#: JUnit 5's console launcher, from Debian's ``junit5`` package (Sandbox Fusion ships 1.8.2 in its tree).
JUNIT_JAR = "/usr/share/java/junit-platform-console-standalone.jar"
#: The JVM options every Java-family run shares: cheap start-up on a small CPU share, deep recursion.
_JVM_FAST = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1")


def _scala_object(code: str) -> str:
    # Sandbox Fusion's runner starts the first ``object X`` it finds (minor.py, find_scala_classname).
    match = re.search(r"object\s+(\w+)", code)
    return match.group(1) if match else "Main"


def _scala_run(code: str) -> list[str]:
    return ["scala", "-J-Xss64m", *(f"-J{opt}" for opt in _JVM_FAST), _scala_object(code)]


def _junit_run(code: str) -> list[str]:
    # The console launcher exits 1 when a test fails, 0 when all pass, as Sandbox Fusion's runner relies on.
    return ["java", *_JVM_FAST, "-jar", JUNIT_JAR, "--class-path", ".", "--scan-class-path"]


def _jest_run(code: str) -> list[str]:
    # Sandbox Fusion runs ``npm run test`` (``FORCE_COLOR=0 jest``) next to a package.json and a babel.config.js
    # (preset-env for the current node, preset-typescript). The same configuration, passed on the command line
    # with absolute paths, so the workspace needs no symlinked node_modules; modulePaths lets tests import
    # @jest/globals and lodash from the shared tree.
    config = {
        "maxWorkers": 2,
        "modulePaths": [NODE_MODULES],
        "transform": {
            r"\.[jt]sx?$": [
                f"{NODE_MODULES}/babel-jest",
                {
                    "presets": [
                        [f"{NODE_MODULES}/@babel/preset-env", {"targets": {"node": "current"}}],
                        f"{NODE_MODULES}/@babel/preset-typescript",
                    ]
                },
            ]
        },
    }
    config["testResultsProcessor"] = f"<rootDir>/{_JEST_PROCESSOR}"
    jest = [NODE_BIN, f"{NODE_MODULES}/jest/bin/jest.js", "--ci", "--config", json.dumps(config)]
    # The processor is written next to the test first, as C#'s config is; the test's own arguments follow.
    return [
        "bash",
        "-c",
        'printf %s "$1" > "$2" && shift 2 && exec "$@"',
        "jest",
        _JEST_REPORT_JS,
        _JEST_PROCESSOR,
        *jest,
    ]


#: Sandbox Fusion's jest project names ``jest-json-reporter`` as its ``testResultsProcessor`` with
#: ``outputFile: jest-report.json``, and its clients fetch that file and read every case from it
#: (``parse_jest_cases``: ``testResults[].testResults[]`` with status, fullName, ancestorTitles...). That is
#: jest's raw aggregated result, which ``--json`` does not write (it renames the cases ``assertionResults``), so
#: a processor of our own writes it as is. It is no boundary: the tests run in the same process and could
#: write the file themselves, exactly as under Sandbox Fusion.
_JEST_PROCESSOR = ".sandboxkit-jest-report.js"
_JEST_REPORT_JS = (
    'const fs = require("fs");\n'
    "module.exports = (results) => {\n"
    '  fs.writeFileSync("jest-report.json", JSON.stringify(results));\n'
    "  return results;\n"
    "};\n"
)


#: Sandbox Fusion builds C# with ``dotnet run`` (the Debug configuration: DEBUG and TRACE defined), where a failed
#: ``Debug.Assert`` ends the process (exit 134). Mono's default listener only logs it, so a wrong solution would
#: pass MultiPL-E's Debug.Assert tests. A listener appended to the source (after the code, so line numbers in
#: compiler messages stay the user's) and named by ``main.exe.config`` restores the exit.
_CSHARP_ASSERT = (
    "\npublic sealed class SandboxkitAssertFails : System.Diagnostics.DefaultTraceListener {\n"
    "  public override void Fail(string message, string detail) {\n"
    '    System.Console.Error.WriteLine("Process terminated. Assertion failed. " + message + " " + detail);\n'
    "    System.Environment.Exit(134);\n"
    "  }\n"
    "}\n"
)
_CSHARP_CONFIG = (
    '<?xml version="1.0"?><configuration><system.diagnostics><trace><listeners><remove name="Default"/>'
    '<add name="sandboxkit" type="SandboxkitAssertFails, main"/></listeners></trace></system.diagnostics>'
    "</configuration>\n"
)


#: The device node of an NVIDIA driver with a GPU: cuda and python_gpu need it inside the sandbox.
NVIDIA_DEVICE = "/dev/nvidiactl"

#: The namespaces .NET 6+ imports implicitly in a console project (``ImplicitUsings``, on in the project that
#: Sandbox Fusion's ``dotnet new console`` creates), so a completion that calls ``Console.WriteLine`` or LINQ
#: without ``using System;`` compiles there. ``mcs`` has no such option; the runner writes them in.
CSHARP_IMPLICIT_USINGS = (
    "System",
    "System.Collections.Generic",
    "System.IO",
    "System.Linq",
    "System.Net.Http",
    "System.Threading",
    "System.Threading.Tasks",
)
_CSHARP_USINGS = "".join(f"using {name}; " for name in CSHARP_IMPLICIT_USINGS)
#: Lines that must stay before any using directive: preprocessor lines (``#define`` must precede every
#: token), ``extern alias``, blank lines and line comments.
_CSHARP_HEADER_LINE = re.compile(r"\s*(#|extern\s+alias\b|//|$)")


def _csharp_source(code: str) -> str:
    # The usings go at the start of the first code line, not on a line of their own, so the line numbers in
    # the compiler's messages stay the user's. A using the code repeats is a warning (CS0105), not an error;
    # the code's own types win over imported ones, as with dotnet's global usings.
    lines = code.rstrip("\n").split("\n")
    first = next((i for i, line in enumerate(lines) if not _CSHARP_HEADER_LINE.match(line)), None)
    if first is not None:
        lines[first] = _CSHARP_USINGS + lines[first]
    return "\n".join(lines) + "\n" + _CSHARP_ASSERT


def _csharp_run(code: str) -> list[str]:
    # The compile step stays a plain ``mcs`` (so a missing toolchain is ToolchainMissing on every backend);
    # the run writes the config next to main.exe first. The program's own arguments follow as "$@".
    script = 'printf %s "$1" > main.exe.config && shift && exec mono main.exe "$@"'
    return ["bash", "-c", script, "csharp", _CSHARP_CONFIG]


def _php_source(code: str) -> str:
    # Sandbox Fusion's ensure_php_tag_in_string: PHP echoes text outside <?php ... ?> instead of running it.
    code = code.lstrip()
    return code if code.startswith("<?php") else "<?php\n" + code


def _cmake_project(file_names: Collection[str]) -> tuple[list[str], list[str]] | None:
    # Sandbox Fusion's cuda runner (sandbox/runners/cuda.py) restores the request's files as the whole project and
    # runs exactly this, then ``./build/main``; ``code`` is not written anywhere. Only a top-level CMakeLists.txt
    # makes a project, as ``cmake ..`` from build/ reads that one.
    if "CMakeLists.txt" not in file_names:
        return None
    return ["bash", "-c", "mkdir build && cd build && cmake .. && make -j 4"], ["./build/main"]


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
        source_name_fn: picks the file name from the code (Java's public class).
        run_fn: builds the run argv from the code (the class or object to start).
        prepare_fn: turns the code into the source file's text: PHP gets ``<?php`` prepended when it lacks
            it (as Sandbox Fusion's runner does), C# gets the assert listener appended.
        install: how to install the toolchain, where ``apt-get install <package>`` is not the way.
        project_fn: given the request's file names, the (compile, run) argv of a project build when they hold
            one (cuda's CMake project), else ``None`` (see :meth:`project_argvs`).
        files: absolute paths of non-executable files the toolchain needs (JUnit's launcher jar).
        unavailable: why the toolchain is not installed by ``scripts/bootstrap.sh`` nor in the Docker
            image (not packaged for Debian bookworm, or needs a GPU); empty for supported languages.
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
    prepare_fn: Callable[[str], str] | None = None
    install: str = ""
    unavailable: str = ""
    files: tuple[str, ...] = ()
    project_fn: Callable[[Collection[str]], tuple[list[str], list[str]] | None] | None = None

    def prepare(self, code: str) -> str:
        """The text written to the source file: ``code``, or what the runner makes of it (PHP's ``<?php``)."""
        return self.prepare_fn(code) if self.prepare_fn else code

    @property
    def install_hint(self) -> str:
        """How to get this toolchain (named in ToolchainMissing errors and by ``sandboxkit doctor``)."""
        return self.install or f"apt-get install {self.package}"

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

    def project_argvs(
        self, code: str, file_names: Collection[str], argv: list[str] | None = None
    ) -> tuple[list[str] | None, list[str]]:
        """The compile and run argv of a request whose files are ``file_names``: its project's, or the usual ones.

        A language with a ``project_fn`` builds the request's files as a project where they hold one (cuda: a
        top-level ``CMakeLists.txt``, as Sandbox Fusion's cuda runner requires); otherwise, and for every other
        language, this is ``compile_argv(code)`` and ``run_argv(code, argv)``.
        """
        project = self.project_fn(file_names) if self.project_fn else None
        if project is None:
            return self.compile_argv(code), self.run_argv(code, argv)
        compile_argv, run_argv = project
        return compile_argv, run_argv + list(argv or [])

    def missing_binaries(self) -> list[str]:
        """Binaries (and required files) of this language that are not on this machine."""
        return [b for b in self.binaries if shutil.which(b) is None] + [f for f in self.files if not file_present(f)]


def file_present(path: str) -> bool:
    """Whether a toolchain's required file is here: a regular file (a jar) or a character device (a GPU)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISCHR(mode)


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
            env={"NODE_PATH": NODE_MODULES},  # lodash & co., as Sandbox Fusion's symlinked node_modules
        ),
        Language(
            name="java",
            aliases=(),
            source="Main.java",
            compile=(
                "javac",
                "-encoding",
                "UTF-8",
                "-cp",
                JAVA_CLASSPATH,
                "-J-XX:+UseSerialGC",
                "-J-XX:TieredStopAtLevel=1",
                "{src}",
            ),
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
            files=(GO_WORK,),
            install=_GO_INSTALL,
            sandbox_fusion="go",
            virtual_memory_hungry=True,
            env=_GO_ENV,
        ),
        # ---- Sandbox Fusion's test-framework "languages": the exit code of the framework is the verdict.
        Language(
            name="pytest",
            aliases=(),
            source="test_main.py",
            run=("pytest", "{src}"),  # as Sandbox Fusion: plain ``pytest <file>``; exit 1 when a test fails
            binaries=("pytest", "python3"),
            package="python3-pytest",
            sandbox_fusion="pytest",
        ),
        Language(
            name="go_test",
            aliases=("gotest",),
            source="main_test.go",
            run=("go", "test", "{src}"),  # go vet's checks run first, as in Sandbox Fusion
            binaries=("go",),
            package="golang-go",
            files=(GO_WORK,),
            install=_GO_INSTALL,
            sandbox_fusion="go_test",
            virtual_memory_hungry=True,
            env=_GO_ENV,
        ),
        Language(
            name="junit",
            aliases=("junit5",),
            source="Main.java",
            compile=("javac", "-encoding", "UTF-8", "-cp", f".:{JUNIT_JAR}", "{src}"),
            run=("java", "-jar", JUNIT_JAR),
            binaries=("javac", "java"),
            package="default-jdk-headless junit5",
            files=(JUNIT_JAR,),
            sandbox_fusion="junit",
            virtual_memory_hungry=True,
            source_name_fn=_java_source_name,
            run_fn=_junit_run,
        ),
        Language(
            name="typescript",
            aliases=("ts",),
            source="main.ts",
            # tsx strips the types without checking them, as in Sandbox Fusion: a type error is not a failure.
            # Its loader runs inside node (``node --import tsx``) rather than through the ``tsx`` CLI, whose
            # relay listens on a unix socket in /tmp, which the sandbox refuses.
            run=(NODE_BIN, "--import", f"{NODE_MODULES}/tsx/dist/loader.mjs", "{src}"),
            binaries=(NODE_BIN, "node"),
            files=(f"{NODE_MODULES}/tsx/dist/loader.mjs",),
            package="nodejs",
            install="the pinned npm packages (tsx among them) that bash scripts/bootstrap.sh --all installs",
            sandbox_fusion="typescript",
            virtual_memory_hungry=True,
            env={"NODE_PATH": NODE_MODULES},
        ),
        Language(
            name="jest",
            aliases=(),
            source="main.test.ts",
            run=(NODE_BIN, "jest"),
            binaries=(NODE_BIN, "node"),
            files=(f"{NODE_MODULES}/jest/bin/jest.js",),
            package="nodejs",
            install="the pinned npm packages (jest among them) that bash scripts/bootstrap.sh --all installs",
            sandbox_fusion="jest",
            virtual_memory_hungry=True,
            env={"FORCE_COLOR": "0", "NODE_PATH": NODE_MODULES},
            run_fn=_jest_run,
        ),
        # ---- the rest of Sandbox Fusion's runners (major.py and minor.py), same commands and flags.
        Language(
            name="php",
            aliases=(),
            source="main.php",
            run=("php", "-f", "{src}"),
            binaries=("php",),
            package="php-cli",
            sandbox_fusion="php",
            prepare_fn=_php_source,
        ),
        Language(
            name="ruby",
            aliases=("rb",),
            source="main.rb",
            run=("ruby", "{src}"),
            binaries=("ruby",),
            package="ruby",
            sandbox_fusion="ruby",
        ),
        Language(
            name="perl",
            aliases=("pl",),
            source="main.pl",
            run=("perl", "{src}"),
            binaries=("perl",),
            package="perl",
            sandbox_fusion="perl",
        ),
        Language(
            name="lua",
            aliases=(),
            source="main.lua",
            run=("lua", "{src}"),
            binaries=("lua",),
            package="lua5.4",
            sandbox_fusion="lua",
        ),
        Language(
            name="r",
            aliases=("rscript",),
            source="main.R",
            run=("Rscript", "{src}"),
            binaries=("Rscript",),
            package="r-base-core",
            sandbox_fusion="R",
        ),
        Language(
            name="racket",
            aliases=("rkt",),
            source="main.rkt",
            run=("racket", "{src}"),
            binaries=("racket",),
            package="racket",
            sandbox_fusion="racket",
            virtual_memory_hungry=True,
        ),
        Language(
            name="d",
            aliases=("dlang", "d_ut"),
            source="main.d",
            # Sandbox Fusion's D_ut runs ``dmd f.d -unittest -of=test``; ldmd2 is LDC's dmd-compatible driver and
            # takes the same flags. With unittest blocks present only they run (druntime's test-or-main mode),
            # and a failing one exits 1.
            compile=("ldmd2", "{src}", "-unittest", "-of={bin}"),
            run=("./{bin}",),
            binaries=("ldmd2",),
            package="ldc",
            sandbox_fusion="D_ut",
        ),
        Language(
            name="scala",
            aliases=(),
            source="main.scala",
            compile=("scalac", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "{src}"),
            run=("scala", "Main"),
            binaries=("scalac", "scala"),
            package="scala",
            sandbox_fusion="scala",
            virtual_memory_hungry=True,
            run_fn=_scala_run,
        ),
        Language(
            name="kotlin",
            aliases=("kotlin_script", "kts", "kt"),
            source="main.kts",
            # Sandbox Fusion runs ``kotlin f.kts`` (Kotlin 2.0); Debian's Kotlin 1.3 runs scripts with
            # ``kotlinc -script``, the same compiler entry point.
            run=("kotlinc", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-script", "{src}"),
            binaries=("kotlinc",),
            package="kotlin",
            sandbox_fusion="kotlin_script",
            virtual_memory_hungry=True,
        ),
        Language(
            name="csharp",
            aliases=("c#", "cs", "mono"),
            source="main.cs",
            # Sandbox Fusion uses the dotnet SDK, which Debian does not package; Mono compiles the same C#, with
            # Debug.Assert ending the process as under dotnet (see _csharp_source).
            compile=("mcs", "-d:DEBUG", "-d:TRACE", "-out:main.exe", "{src}"),
            run=("mono", "main.exe"),
            binaries=("mcs", "mono"),
            package="mono-mcs mono-runtime",
            sandbox_fusion="csharp",
            virtual_memory_hungry=True,
            prepare_fn=_csharp_source,
            run_fn=_csharp_run,
        ),
        Language(
            name="verilog",
            aliases=("systemverilog", "sv", "iverilog"),
            source="main.sv",
            # Sandbox Fusion's flags (after NVlabs' verilog-eval): the testbench module must be named ``tb``.
            compile=(
                "iverilog",
                "-Wall",
                "-Winfloop",
                "-Wno-timescale",
                "-g2012",
                "-s",
                "tb",
                "-o",
                "test.vvp",
                "{src}",
            ),
            run=("vvp", "-n", "test.vvp"),
            binaries=("iverilog", "vvp"),
            package="iverilog",
            sandbox_fusion="verilog",
        ),
        Language(
            name="sql",
            aliases=("sqlite", "sqlite3"),
            source="main.sql",
            # Sandbox Fusion lists ``sql`` but has no runner for it (a SandboxError); sandboxkit runs the script
            # in a fresh in-memory SQLite database, stopping at the first error (exit 1).
            run=("sqlite3", "-bail", "-batch", ":memory:", ".read {src}"),
            binaries=("sqlite3",),
            package="sqlite3",
            sandbox_fusion="sql",
        ),
        # ---- Sandbox Fusion languages whose toolchain cannot be installed on these machines: requests raise
        # ToolchainMissing naming what to install; a custom image that has it runs them.
        Language(
            name="julia",
            aliases=("jl",),
            source="main.jl",
            run=("julia", "{src}"),
            binaries=("julia",),
            package="julia",
            install="Julia from https://julialang.org/downloads/ (binary tarball, into /usr/local)",
            unavailable="not packaged for Debian bookworm (dropped after bullseye's 1.5)",
            sandbox_fusion="julia",
            virtual_memory_hungry=True,
        ),
        Language(
            name="swift",
            aliases=(),
            source="main.swift",
            compile=("swiftc", "{src}", "-o", "{bin}"),
            run=("./{bin}",),
            binaries=("swiftc",),
            package="swift",
            install="the Swift toolchain from https://www.swift.org/install/linux/ (into /usr)",
            unavailable="not packaged for Debian bookworm (swift.org ships its own toolchain tarballs)",
            sandbox_fusion="swift",
        ),
        Language(
            name="lean",
            aliases=("lean4",),
            source="Main.lean",
            run=("lake", "build"),
            binaries=("lake", "lean"),
            package="lean4",
            install="elan + Lean 4 (https://leanprover-community.github.io) and a Mathlib project",
            unavailable="not packaged for Debian bookworm; Sandbox Fusion builds in a Mathlib project of several GB",
            sandbox_fusion="lean",
        ),
        Language(
            name="cuda",
            aliases=("cu",),
            source="main.cu",
            compile=("nvcc", "-o", "{bin}", "{src}"),
            run=("./{bin}",),
            # nvcc alone compiles, then every kernel launch fails ("CUDA driver version is insufficient"): a
            # correct answer would score 0. Without the driver's nvidia-smi and the GPU's device node in the
            # sandbox, the language is refused (ToolchainMissing) before anything runs.
            binaries=("nvcc", "nvidia-smi"),
            files=(NVIDIA_DEVICE,),
            package="nvidia-cuda-toolkit",
            project_fn=_cmake_project,
            install="a machine with an NVIDIA GPU, its driver (nvidia-smi, /dev/nvidiactl) and the CUDA toolkit "
            "(nvidia-cuda-toolkit, Debian non-free)",
            unavailable="needs an NVIDIA GPU: nvcc alone compiles, but no kernel can run without one",
            sandbox_fusion="cuda",
        ),
        Language(
            name="python_gpu",
            aliases=(),
            source="main.py",
            # The "compile" step checks for a GPU: without nvidia-smi every backend raises ToolchainMissing,
            # and with no GPU visible the run stops there instead of silently running on the CPU.
            compile=("nvidia-smi", "-L"),
            run=("python3", "-u", "{src}"),
            binaries=("nvidia-smi", "python3"),
            files=(NVIDIA_DEVICE,),
            package="nvidia-driver",
            install="a machine with an NVIDIA GPU, its driver (nvidia-smi) and a CUDA build of torch",
            unavailable="needs an NVIDIA GPU; these machines have none",
            sandbox_fusion="python_gpu",
        ),
    )
}

_BY_ALIAS: dict[str, Language] = {}
for _lang in LANGUAGES.values():
    for _key in (_lang.name, *_lang.aliases, _lang.sandbox_fusion):
        _BY_ALIAS.setdefault(_key.lower(), _lang)  # lookups lower-case the name: Sandbox Fusion's "R", "D_ut"


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
