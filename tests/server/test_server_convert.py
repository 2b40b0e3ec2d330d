"""The mapping between sandboxkit results and Sandbox Fusion responses, both directions."""

from __future__ import annotations

import pytest

from sandboxkit.errors import Transient
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status
from sandboxkit.protocols.sandbox_fusion import (
    RunCodeRequest,
    RunCodeResponse,
    request_from_sandbox_fusion,
    request_to_sandbox_fusion,
    result_from_sandbox_fusion,
    result_to_sandbox_fusion,
)

CPP = RunRequest(code="int main(){}", language="cpp")


def sample(status: Status) -> RunResult:
    compile_step = (
        ExecResult(status=Status.OK, exit_code=0)
        if status is not Status.COMPILE_ERROR
        else ExecResult(status=Status.FAILED, exit_code=1, stderr="error: expected ';'")
    )
    exit_code = {Status.OK: 0, Status.FAILED: 3}.get(status)
    signal = 9 if status in (Status.MEMORY_EXCEEDED, Status.OUTPUT_LIMIT) else None
    return RunResult(
        status=status,
        exit_code=exit_code,
        signal=signal,
        stdout="" if status is Status.COMPILE_ERROR else "out\n",
        stdout_truncated=status is Status.OUTPUT_LIMIT,
        compile=compile_step,
        files={"f.bin": b"\x00\xff"},
        language="cpp",
    )


@pytest.mark.parametrize("status", list(Status))
def test_every_status_survives_a_round_trip_through_json(status: Status) -> None:
    wire = result_to_sandbox_fusion(sample(status)).model_dump_json()
    back = result_from_sandbox_fusion(RunCodeResponse.model_validate_json(wire), CPP, backend="sf", sandbox_id="x")
    original = sample(status)
    assert back.status is status
    assert (back.exit_code, back.signal) == (original.exit_code, original.signal)
    assert back.stdout == original.stdout and back.stdout_truncated == original.stdout_truncated
    assert back.files == original.files


def test_sandbox_fusion_statuses_without_the_extension_fields() -> None:
    def parse(payload: dict[str, object]) -> RunResult:
        return result_from_sandbox_fusion(RunCodeResponse.model_validate(payload), CPP, backend="sf", sandbox_id=None)

    tle = parse({"status": "Failed", "message": "", "run_result": {"status": "TimeLimitExceeded", "stdout": "p"}})
    assert tle.status is Status.TIMEOUT and tle.exit_code is None and tle.stdout == "p"
    killed = parse({"status": "Failed", "message": "", "run_result": {"status": "Finished", "return_code": -9}})
    assert killed.status is Status.FAILED and killed.signal == 9
    ce = parse({"status": "Failed", "message": "", "compile_result": {"status": "TimeLimitExceeded"}})
    assert ce.status is Status.COMPILE_ERROR and ce.compile is not None and ce.compile.status is Status.TIMEOUT
    with pytest.raises(Transient, match="SandboxError"):
        parse({"status": "SandboxError", "message": "runner exploded"})
    with pytest.raises(Transient, match="no run_result"):
        parse({"status": "Success", "message": ""})


def test_python_result_has_null_compile_result_and_compile_error_has_null_run_result() -> None:
    ok = result_to_sandbox_fusion(RunResult(status=Status.OK, exit_code=0, stdout="1\n"))
    ce = result_to_sandbox_fusion(sample(Status.COMPILE_ERROR))
    assert ok.compile_result is None and ok.run_result is not None and ok.status.value == "Success"
    assert ce.run_result is None and ce.compile_result is not None and ce.compile_result.return_code == 1


def test_request_fields_both_ways() -> None:
    req = RunRequest(
        code="console.log(1)",
        language="javascript",
        stdin="in",
        files={"a/b.txt": b"hi"},
        fetch_files=["out.txt"],
        limits=Limits(timeout_s=3, compile_timeout_s=4, memory_mb=256),
    )
    body = request_to_sandbox_fusion(req)
    assert body == {
        "compile_timeout": 4.0,
        "run_timeout": 3.0,
        "memory_limit_MB": 256,
        "code": "console.log(1)",
        "stdin": "in",
        "language": "nodejs",
        "files": {"a/b.txt": "aGk="},
        "fetch_files": ["out.txt"],
    }
    back = request_from_sandbox_fusion(RunCodeRequest.model_validate(body), Limits())
    assert (back.language, back.files, back.limits.memory_mb, back.limits.timeout_s) == (
        "javascript",
        req.files,
        256,
        3,
    )
    unlimited = request_from_sandbox_fusion(RunCodeRequest(code="x", language="python", memory_limit_MB=-1), Limits())
    assert unlimited.limits.memory_mb == Limits().memory_mb  # -1 keeps the server's default, never "no limit"
