"""The adapters' small shared pieces: the /testbed layout map, the editor, result text, settings."""

from __future__ import annotations

import pytest

from sandboxkit import BackendUnavailable, ExecResult, InvalidRequest, RunResult, Status
from sandboxkit.integrations._editor import EditError, insert, str_replace, view
from sandboxkit.integrations._format import format_error, format_result, truncate_middle
from sandboxkit.integrations._runtime import PoolHandle, env_settings
from sandboxkit.integrations._workspace import WorkspaceMap


def test_workspace_map_rewrites_whole_path_components_only() -> None:
    ws = WorkspaceMap("/testbed")
    ws.bind("/tmp/sbx-1/\n")
    assert ws.command("cd /testbed && cat /testbed/a.py > /testbed2/b") == (
        "cd /tmp/sbx-1 && cat /tmp/sbx-1/a.py > /testbed2/b"
    )
    assert ws.output("/tmp/sbx-1/a.py: error") == "/testbed/a.py: error"
    assert ws.relative("/testbed/src/a.py") == "src/a.py" == ws.relative("src/a.py")
    assert ws.relative("/tmp/sbx-1/src/a.py") == "src/a.py"
    for bad in ("/etc/passwd", "../x", "/testbed/../etc", ""):
        with pytest.raises(ValueError):
            ws.relative(bad)
    assert WorkspaceMap("/app", outside="rebase").relative("/etc/x") == "etc/x"
    same = WorkspaceMap("/testbed")
    same.bind("/testbed")
    assert same.command("ls /testbed") == "ls /testbed"


def test_editor_operations() -> None:
    text = "a\nb\nb\nc\n"
    assert "     2\tb" in view(text, "/t/f")
    assert view(text, "/t/f", [3, -1]).splitlines()[1:] == ["     3\tb", "     4\tc", "     5\t"]
    with pytest.raises(EditError, match="appears 2 times"):
        str_replace(text, "/t/f", "b", "x")
    updated, message = str_replace(text, "/t/f", "c\n", "d\n")
    assert updated == "a\nb\nb\nd\n" and "has been edited" in message
    assert insert(text, "/t/f", 1, "z")[0] == "a\nz\nb\nb\nc\n"
    assert insert("", "/t/f", 0, "first")[0] == "first\n"
    with pytest.raises(EditError):
        view(text, "/t/f", [9, 10])


def test_result_text_says_what_happened() -> None:
    ok = ExecResult(status=Status.OK, exit_code=0, stdout="hi\n")
    assert format_result(ok) == "hi"
    failed = ExecResult(status=Status.FAILED, exit_code=2, stderr="boom\n")
    assert format_result(failed) == "boom\n[exit code 2]"
    timeout = ExecResult(status=Status.TIMEOUT, stdout="partial")
    assert format_result(timeout) == "partial\n[stopped: the time limit was exceeded]"
    compile_error = RunResult(
        status=Status.COMPILE_ERROR, compile=ExecResult(status=Status.FAILED, exit_code=1, stderr="x.c:1: error")
    )
    assert format_result(compile_error) == "Compilation failed:\nx.c:1: error"
    assert format_result(ExecResult(status=Status.OK, exit_code=0)) == "(no output)"
    assert len(truncate_middle("x" * 10_000, 100)) <= 100
    assert format_error(BackendUnavailable("engine down", backend="docker")).startswith(
        "Error: the code sandbox failed"
    )
    assert format_error(InvalidRequest("bad language")).startswith("Error: the request was rejected")


def test_env_settings_and_handle_validation() -> None:
    env = {"SANDBOXKIT_BACKEND": "docker", "SANDBOXKIT_TIMEOUT": "2.5", "SANDBOXKIT_BACKEND_OPTIONS": '{"a": 1}'}
    assert env_settings(env) == {"backend": "docker", "timeout": 2.5, "backend_options": {"a": 1}}
    with pytest.raises(InvalidRequest, match="SANDBOXKIT_MAX_CONCURRENCY"):
        env_settings({"SANDBOXKIT_MAX_CONCURRENCY": "many"})
    handle = PoolHandle("subprocess")
    assert not handle.created
    handle.close()  # closing a never-used handle is a no-op
