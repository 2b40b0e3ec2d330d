"""Models: validation, JSON both ways, bytes as base64, safe paths."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandboxkit import ExecResult, InvalidRequest, Limits, RunRequest, RunResult, Status
from sandboxkit.languages import LANGUAGES, resolve_language, sandbox_fusion_name
from sandboxkit.models import check_relative_path, check_sandbox_path, decode_output


def test_run_request_round_trips_json_with_binary_files() -> None:
    req = RunRequest(
        code="print(1)",
        language="py",
        stdin="x",
        files={"a/b.bin": b"\x00\xff", "t.txt": "é"},
        fetch_files=["out.txt"],
        limits=Limits(timeout_s=2, network=True),
    )
    assert req.language == "python"
    assert req.files["t.txt"] == "é".encode()
    again = RunRequest.model_validate_json(req.model_dump_json())
    assert again == req
    assert '"AP8="' in req.model_dump_json()  # bytes travel as base64 in JSON


def test_run_result_round_trips_json() -> None:
    res = RunResult(
        status=Status.COMPILE_ERROR,
        compile=ExecResult(status=Status.FAILED, exit_code=1, stderr="e"),
        files={"o": b"\x01"},
        backend="subprocess",
        sandbox_id="s1",
    )
    assert RunResult.model_validate_json(res.model_dump_json()) == res
    with pytest.raises(ValidationError, match="compile step"):
        RunResult(status=Status.COMPILE_ERROR)


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../b", "", "a\x00b", "..", "."])
def test_paths_that_escape_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        check_relative_path(bad)
    with pytest.raises(ValidationError):
        RunRequest(code="", files={bad: "x"})


def test_paths_are_normalised() -> None:
    assert check_relative_path("a/./b//c.txt") == "a/b/c.txt"


def test_sandbox_paths_take_absolute_paths_only_when_the_sandbox_has_a_root() -> None:
    assert check_sandbox_path("//testbed/./x.txt", absolute_ok=True) == "/testbed/x.txt"
    assert check_sandbox_path("a/./b", absolute_ok=True) == "a/b"
    with pytest.raises(ValueError, match="absolute"):
        check_sandbox_path("/testbed/x.txt", absolute_ok=False)


@pytest.mark.parametrize("bad", ["/testbed/../etc", "/..", "/", "//", "/a\x00", "/" + "n" * 256, "../x", ""])
def test_sandbox_paths_refuse_escapes_even_when_absolute(bad: str) -> None:
    with pytest.raises(ValueError):
        check_sandbox_path(bad, absolute_ok=True)


def test_limits_validation_and_merge() -> None:
    with pytest.raises(ValidationError):
        Limits(timeout_s=-1)
    with pytest.raises(ValidationError):
        Limits(memory_mb=0)
    assert Limits().merged(timeout_s=3, memory_mb=None).timeout_s == 3
    with pytest.raises(ValidationError):
        Limits(bogus=1)  # type: ignore[call-arg]


def test_languages_resolve_aliases_and_reject_unknown() -> None:
    assert resolve_language("C++").name == "cpp"
    assert resolve_language("nodejs").name == "javascript"
    assert sandbox_fusion_name("javascript") == "nodejs"
    with pytest.raises(InvalidRequest, match=r"unknown language 'cobol'.*python"):
        resolve_language("cobol")
    assert {"python", "bash", "c", "cpp", "javascript", "java", "rust", "go"} < set(LANGUAGES)
    assert len(LANGUAGES) == 30  # the eight above and Sandbox Fusion's others (docs/languages.md)


def test_java_source_name_follows_the_public_class() -> None:
    java = LANGUAGES["java"]
    code = "import java.util.*;\npublic class Solution { public static void main(String[] a) {} }"
    assert java.source_name(code) == "Solution.java"
    assert java.run_argv(code)[-1] == "Solution"
    assert java.source_name("class X {}") == "Main.java"


def test_decode_output_never_raises() -> None:
    assert decode_output(b"ok\xff") == "ok\ufffd"
