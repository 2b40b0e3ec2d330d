"""Test-case parsing: the native shapes, verl/APPS ground truth, Sandbox Fusion provided_data, bad input."""

from __future__ import annotations

import json

import pytest

from sandboxkit.judge import AssertCase, CallCase, CompareOptions, InvalidTests, StdioCase, parse_compare, parse_tests


def test_native_case_types() -> None:
    suite = parse_tests(
        [
            {"type": "stdio", "stdin": "1 2\n", "expected_stdout": "3\n"},
            {"type": "assert", "code": "assert f(1) == 2"},
            {"type": "call", "fn_name": "f", "args": [1], "kwargs": {"k": 2}, "expected": 2},
        ]
    )
    assert suite.shape == "sandboxkit"
    stdio, check, call = suite.cases
    assert isinstance(stdio, StdioCase) and stdio.expected_stdout == "3\n"
    assert isinstance(check, AssertCase) and check.code == "assert f(1) == 2"
    assert isinstance(call, CallCase) and (call.args, call.kwargs, call.expected) == ([1], {"k": 2}, 2)


def test_type_is_inferred_when_left_out() -> None:
    kinds = [c.type for c in parse_tests([{"stdin": "x"}, {"code": "pass"}, {"fn_name": "f", "expected": None}]).cases]
    assert kinds == ["stdio", "assert", "call"]


def test_suite_with_compare_options_and_a_default_fn_name() -> None:
    suite = parse_tests(
        {
            "fn_name": "add",
            "compare": {"whitespace": "all", "float_tol": 1e-6},
            "cases": [{"args": [1, 2], "expected": 3}, {"type": "stdio", "stdin": ""}],
        }
    )
    assert suite.compare == CompareOptions(whitespace="all", float_tol=1e-6)
    call = suite.cases[0]
    assert isinstance(call, CallCase) and call.fn_name == "add"
    assert isinstance(suite.cases[1], StdioCase)


def test_verl_stdio_shape_as_dict_and_as_json_string() -> None:
    truth = {"inputs": ["1 2\n", ["3", "4"]], "outputs": ["3\n", ["7"]]}
    for given in (truth, json.dumps(truth)):
        suite = parse_tests(given)
        assert suite.shape == "verl"
        assert [(c.stdin, c.expected_stdout) for c in suite.cases if isinstance(c, StdioCase)] == [
            ("1 2\n", "3\n"),
            ("3\n4", "7"),
        ]


def test_verl_call_shape_json_lines_and_lists() -> None:
    truth = {"fn_name": "add", "inputs": ["1\n2", [[1], [2]]], "outputs": ["3", [[1, 2]]]}
    suite = parse_tests(json.dumps(truth))
    assert suite.shape == "verl_call"
    first, second = suite.cases
    assert isinstance(first, CallCase) and isinstance(second, CallCase)
    assert (first.args, first.expected, first.unwrap_expected) == ([1, 2], 3, True)
    assert (second.args, second.expected) == ([[1], [2]], [[1, 2]])


def test_verl_assert_case_shape() -> None:
    suite = parse_tests(json.dumps({"assert_case": ["assert f() == 1", "assert f() != 2"]}))
    assert suite.shape == "verl_assert"
    assert [c.code for c in suite.cases if isinstance(c, AssertCase)] == ["assert f() == 1", "assert f() != 2"]


def test_sandbox_fusion_provided_data_test_lists() -> None:
    items = [
        {"input": {"stdin": "1\n"}, "output": {"stdout": "2\n"}},
        {"input": {"stdin": ""}, "output": {"stdout": ""}},
    ]
    for given in ({"test": items}, {"test": json.dumps(items)}, items, json.dumps({"id": 3, "test": items})):
        suite = parse_tests(given)
        assert suite.shape == "sandbox_fusion"
        assert [(c.stdin, c.expected_stdout) for c in suite.cases if isinstance(c, StdioCase)] == [
            ("1\n", "2\n"),
            ("", ""),
        ]


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        (None, "no tests given"),
        ("{not json", "not valid JSON"),
        ([], "no test cases"),
        ([{"type": "fuzz", "stdin": ""}], "case 0: unknown test type 'fuzz'"),
        ([{"type": "stdio", "stdin": 3}], r"case 0 \(stdio\): stdin"),
        ([{"type": "call", "args": [1]}], r"case 0 \(call\): fn_name"),
        ([{"type": "stdio", "stdin": "", "extra_field": 1}], "extra_field"),
        ([5], "case 0: must be an object"),
        ({"inputs": ["1"], "outputs": []}, "1 inputs but 0 outputs"),
        ({"inputs": "1", "outputs": "2"}, "need 'inputs' and 'outputs' lists"),
        ({"fn_name": "f", "inputs": ["{bad"], "outputs": ["1"]}, "one per line"),
        ({"assert_case": [3]}, r"assert_case\[0\] must be a string"),
        ({"test": [{"input": {"stdin": 1}, "output": {"stdout": "x"}}]}, "input.stdin and output.stdout"),
        ({"what": 1}, "none of the accepted shapes"),
        ({"cases": "{}"}, "'cases' must be a list, got dict"),
        ({"cases": "[oops"}, "'cases' is a string but not valid JSON"),
        ({"test": 5}, r"'test' must be a list of \{'input', 'output'\} items, got int"),
        (3.5, "must be a list or a dict"),
    ],
)
def test_bad_tests_raise_a_clear_error(tests: object, message: str) -> None:
    with pytest.raises(InvalidTests, match=message):
        parse_tests(tests)


def test_compare_option_forms() -> None:
    assert parse_compare(None) is None
    assert parse_compare("all") == CompareOptions(whitespace="all")
    assert parse_compare({"case_sensitive": False}) == CompareOptions(case_sensitive=False)
    with pytest.raises(InvalidTests, match="not one of"):
        parse_compare("fuzzy")
    with pytest.raises(InvalidTests, match="float_tol"):
        parse_compare({"float_tol": -1})
