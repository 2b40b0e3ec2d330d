"""Small programs per language, shared by the language-table tests of every command backend.

Each language has the same five programs, so a row that passes on one backend and fails on another
points at the backend, never at the program. The test-framework "languages" (pytest, go_test, junit)
have a passing and a failing suite instead: their verdict is the framework's exit code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Programs:
    """One language's programs.

    Attributes:
        hello: prints ``hello`` and a newline.
        echo: prints stdin's first line back, or ``None`` where the language reads no stdin (SQL).
        runtime_error: compiles, then fails at run time with a non-zero exit.
        loop: never ends.
        bad: does not compile (compiled languages) or does not parse.
    """

    hello: str
    echo: str | None
    runtime_error: str
    loop: str
    bad: str = "this is not a program {"


#: The languages added for Sandbox Fusion parity (issue 14); the older eight keep their own tables.
PROGRAMS: dict[str, Programs] = {
    "php": Programs(
        hello='echo "hello\\n";',  # no <?php: the runner adds it, as Sandbox Fusion's does
        echo="<?php\necho fgets(STDIN);",
        runtime_error="<?php\nexit(3);",
        loop="<?php\nwhile (true) {}",
    ),
    "ruby": Programs(hello='puts "hello"', echo="puts gets", runtime_error='raise "boom"', loop="loop {}"),
    "perl": Programs(
        hello='print "hello\\n";',
        echo="my $l = <STDIN>; print $l;",
        runtime_error='die "boom\\n";',
        loop="1 while 1;",
    ),
    "lua": Programs(
        hello='print("hello")',
        echo='print(io.read("l"))',
        runtime_error='error("boom")',
        loop="while true do end",
    ),
    "r": Programs(
        hello='cat("hello\\n")',
        echo='cat(readLines(file("stdin"), n = 1), "\\n", sep = "")',
        runtime_error='stop("boom")',
        loop="repeat {}",
    ),
    "racket": Programs(
        hello='#lang racket\n(displayln "hello")',
        echo="#lang racket\n(displayln (read-line))",
        runtime_error='#lang racket\n(error "boom")',
        loop="#lang racket\n(let loop () (loop))",
    ),
    "d": Programs(
        hello='import std.stdio;\nvoid main() { writeln("hello"); }',
        echo="import std.stdio;\nvoid main() { write(readln()); }",
        runtime_error='void main() { throw new Exception("boom"); }',
        loop="void main() { int x; for (;;) { x++; } }",
    ),
    "scala": Programs(
        hello='object Main { def main(args: Array[String]): Unit = println("hello") }',
        echo="object Main { def main(args: Array[String]): Unit = println(scala.io.StdIn.readLine()) }",
        runtime_error='object Main { def main(args: Array[String]): Unit = throw new RuntimeException("boom") }',
        loop="object Main { def main(args: Array[String]): Unit = while (true) {} }",
    ),
    "kotlin": Programs(
        hello='println("hello")',
        echo="println(readLine())",
        runtime_error='throw RuntimeException("boom")',
        loop="while (true) {}",
    ),
    "csharp": Programs(
        hello='class P { static void Main() { System.Console.WriteLine("hello"); } }',
        echo="class P { static void Main() { System.Console.WriteLine(System.Console.ReadLine()); } }",
        runtime_error='class P { static void Main() { throw new System.Exception("boom"); } }',
        loop="class P { static void Main() { while (true) {} } }",
    ),
    "verilog": Programs(
        hello='module tb; initial begin $display("hello"); $finish; end endmodule',
        echo="module tb; reg [8*256-1:0] line; integer r;\n"
        'initial begin r = $fgets(line, 32\'h8000_0000); $write("%0s", line); $finish; end endmodule',
        runtime_error='module tb; initial begin $fatal(1, "boom"); end endmodule',
        loop="module tb; reg c = 0; always #1 c = ~c; endmodule",
        bad="module tb; initial begin $display(; end",
    ),
    "sql": Programs(
        hello="SELECT 'hello';",
        echo=None,
        runtime_error="SELECT * FROM no_such_table;",
        loop="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;",
    ),
    "typescript": Programs(
        hello='const greeting: string = "hello";\nconsole.log(greeting);',
        echo="const line: string = require('fs').readFileSync(0, 'utf8').split('\\n')[0];\nconsole.log(line);",
        runtime_error="throw new Error('boom');",
        loop="for (;;) {}",
        bad="function ( {",
    ),
}

#: Languages with a compile step among PROGRAMS (a broken program is a compile_error, not a failed run).
COMPILED = ("d", "scala", "csharp", "verilog")


@dataclass(frozen=True)
class Suite:
    """A test-framework language's passing and failing suites (plus a broken one where it compiles)."""

    passing: str
    failing: str
    marker: str  # text the framework prints about the failing test


SUITES: dict[str, Suite] = {
    "pytest": Suite(
        passing="def add(a, b):\n    return a + b\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        failing="def add(a, b):\n    return a + b + 1\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        marker="test_add",
    ),
    "go_test": Suite(
        passing='package main\nimport "testing"\nfunc add(a, b int) int { return a + b }\n'
        'func TestAdd(t *testing.T) { if add(1, 2) != 3 { t.Fatal("add(1, 2) != 3") } }\n',
        failing='package main\nimport "testing"\nfunc add(a, b int) int { return a + b + 1 }\n'
        'func TestAdd(t *testing.T) { if add(1, 2) != 3 { t.Fatal("add(1, 2) != 3") } }\n',
        marker="TestAdd",
    ),
    "junit": Suite(
        passing="import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.assertEquals;\n"
        "public class AddTest {\n  static int add(int a, int b) { return a + b; }\n"
        "  @Test void adds() { assertEquals(3, add(1, 2)); }\n}\n",
        failing="import org.junit.jupiter.api.Test;\nimport static org.junit.jupiter.api.Assertions.assertEquals;\n"
        "public class AddTest {\n  static int add(int a, int b) { return a + b + 1; }\n"
        "  @Test void adds() { assertEquals(3, add(1, 2)); }\n}\n",
        marker="adds()",
    ),
    "jest": Suite(
        passing="import { expect, test } from '@jest/globals';\n"
        "function add(a: number, b: number): number { return a + b; }\n"
        "test('adds', () => { expect(add(1, 2)).toBe(3); });\n",
        failing="import { expect, test } from '@jest/globals';\n"
        "function add(a: number, b: number): number { return a + b + 1; }\n"
        "test('adds', () => { expect(add(1, 2)).toBe(3); });\n",
        marker="adds",
    ),
}
