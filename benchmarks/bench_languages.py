"""Hello world in every installed language: the subprocess sandbox against the bare toolchain, side by side.

What a language costs per run (compile plus run) decides how many RL rollouts a machine grades per
second, and the JVM-family languages (scala, kotlin, junit) cost seconds where C costs milliseconds.
The baseline runs the *same* argv from the language table (``sandboxkit.languages``), in a temporary
directory, with no isolation. The sandbox row adds the namespaces, the private uid, the cgroup and
rlimits. Rounds alternate between the two, and medians are compared, because the machine is shared.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import subprocess
import tempfile
import time

from sandboxkit import RunRequest
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._workspace import SANDBOX_PATH
from sandboxkit.benchmarking import Row, row_from_samples
from sandboxkit.languages import LANGUAGES
from sandboxkit.models import Limits

BENCH = "languages"
LIMITS = Limits(timeout_s=60.0, compile_timeout_s=120.0, memory_mb=2048)

HELLO = {
    "python": "print('hello')",
    "bash": "echo hello",
    "c": '#include <stdio.h>\nint main(void){puts("hello");return 0;}',
    "cpp": '#include <iostream>\nint main(){std::cout<<"hello"<<std::endl;}',
    "javascript": "console.log('hello')",
    "typescript": "const s: string = 'hello';\nconsole.log(s);",
    "java": 'public class Main{public static void main(String[] a){System.out.println("hello");}}',
    "rust": 'fn main(){println!("hello");}',
    "go": 'package main\nimport "fmt"\nfunc main(){fmt.Println("hello")}',
    "php": 'echo "hello\\n";',
    "ruby": 'puts "hello"',
    "perl": 'print "hello\\n";',
    "lua": 'print("hello")',
    "r": 'cat("hello\\n")',
    "racket": '#lang racket\n(displayln "hello")',
    "d": 'import std.stdio;\nvoid main() { writeln("hello"); }',
    "scala": 'object Main { def main(args: Array[String]): Unit = println("hello") }',
    "kotlin": 'println("hello")',
    "csharp": 'class P { static void Main() { System.Console.WriteLine("hello"); } }',
    "verilog": 'module tb; initial begin $display("hello"); $finish; end endmodule',
    "sql": "SELECT 'hello';",
}


def _bare(language: str) -> float:
    """One compile+run with no sandbox: the same argv, a fresh temporary directory."""
    lang = LANGUAGES[language]
    code = HELLO[language]
    with tempfile.TemporaryDirectory(prefix="sandboxkit-bench-") as tmp:
        with open(os.path.join(tmp, lang.source_name(code)), "w") as f:
            f.write(lang.prepare(code))
        env = {"PATH": SANDBOX_PATH, "HOME": tmp, "LANG": "C.UTF-8"}
        for key, value in lang.env.items():
            env[key] = posixpath.join(tmp, value) if "/" in value and not posixpath.isabs(value) else value
        started = time.perf_counter()
        compile_argv = lang.compile_argv(code)
        if compile_argv is not None:
            subprocess.run(compile_argv, cwd=tmp, env=env, capture_output=True, check=True)
        out = subprocess.run(lang.run_argv(code), cwd=tmp, env=env, capture_output=True, check=True)
        elapsed = time.perf_counter() - started
    assert out.stdout.strip() == b"hello", out
    return elapsed


async def _measure(languages: list[str], rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    backend = SubprocessBackend()
    sandbox = await backend.open(LIMITS)
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in languages}
    try:
        for _ in range(rounds):
            for name in languages:
                samples[name][0].append(await asyncio.to_thread(_bare, name))
                started = time.perf_counter()
                result = await sandbox.run(RunRequest(code=HELLO[name], language=name, limits=LIMITS))
                samples[name][1].append(time.perf_counter() - started)
                assert result.stdout.strip() == "hello", result
    finally:
        await sandbox.close()
        await backend.aclose()
    return samples


def run(quick: bool = False) -> list[Row]:
    """Measure and return the rows (``sandboxkit bench languages``)."""
    backend = SubprocessBackend()
    languages = [name for name in HELLO if backend.has_toolchain(LANGUAGES[name])]
    samples = asyncio.run(_measure(languages, 3 if quick else 7))
    load = os.getloadavg()[0]
    rows: list[Row] = []
    for name in languages:
        bare, boxed = samples[name]
        base = row_from_samples(BENCH, f"{name}: bare toolchain, compile+run", bare, extra={"load_avg_1m": load})
        row = row_from_samples(
            BENCH,
            f"{name}: subprocess sandbox.run",
            boxed,
            baseline="bare toolchain",
            extra={"load_avg_1m": load},
        )
        row.ratio = row.median_ms / base.median_ms if base.median_ms else None
        rows += [base, row]
    return rows
