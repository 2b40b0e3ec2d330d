"""The judge: turn completions plus tests into verdicts and rewards, at batch speed.

Every adapter (TRL, verl, the server) and ``sandboxkit grade`` compute rewards this one way::

    from sandboxkit import SandboxPool
    from sandboxkit.judge import grade

    async with SandboxPool("subprocess") as pool:
        verdict = await grade(pool, completion, tests, language="python", shaping="pass_rate")
        verdict.reward        # float, or None when the sandbox infrastructure failed
        verdict.to_dict()     # flat dict, same keys on every path (verl columns)

See ``docs/judge.md`` for the accepted test shapes, comparison options and shaping.
"""

from sandboxkit.judge.banned import compile_patterns, find_banned
from sandboxkit.judge.cases import (
    AssertCase,
    CallCase,
    CompareOptions,
    InvalidTests,
    StdioCase,
    TestCase,
    TestSuite,
    parse_compare,
    parse_tests,
)
from sandboxkit.judge.checkers import Checker, CheckerFailed, parse_checker
from sandboxkit.judge.compare import compare_stdout, compare_values
from sandboxkit.judge.extract import Extraction, completion_text, extract_code
from sandboxkit.judge.grader import grade, grade_many, grade_row
from sandboxkit.judge.shaping import Shaping, parse_shaping
from sandboxkit.judge.verdict import CaseResult, Verdict

__all__ = [
    "AssertCase",
    "CallCase",
    "CaseResult",
    "Checker",
    "CheckerFailed",
    "CompareOptions",
    "Extraction",
    "InvalidTests",
    "Shaping",
    "StdioCase",
    "TestCase",
    "TestSuite",
    "Verdict",
    "compare_stdout",
    "compare_values",
    "compile_patterns",
    "completion_text",
    "extract_code",
    "find_banned",
    "grade",
    "grade_many",
    "grade_row",
    "parse_checker",
    "parse_compare",
    "parse_shaping",
    "parse_tests",
]
