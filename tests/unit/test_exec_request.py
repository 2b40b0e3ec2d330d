"""``ExecRequest``: ``Sandbox.exec``'s keywords checked once, in the base class, and handed to backends as one value."""

from __future__ import annotations

from typing import Any

import pytest

from sandboxkit.base import Sandbox
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import ExecRequest, ExecResult, Status


def test_a_command_line_runs_under_the_shell_and_an_argv_as_given() -> None:
    assert ExecRequest.of("echo hi").argv() == ["bash", "-c", "echo hi"]
    assert ExecRequest.of("echo hi").argv("/bin/sh") == ["/bin/sh", "-c", "echo hi"]
    assert ExecRequest.of(["ls", 1]).argv() == ["ls", "1"]  # an argv's parts as text


@pytest.mark.parametrize("timeout", [0, -1.0, True, "5"])
def test_a_timeout_that_is_not_a_positive_number_is_the_callers_mistake(timeout: object) -> None:
    with pytest.raises(InvalidRequest, match="positive") as info:
        ExecRequest.of("true", timeout=timeout, backend="b", sandbox_id="s")  # type: ignore[arg-type]
    assert repr(timeout) in str(info.value)
    assert info.value.backend == "b" and info.value.sandbox_id == "s"


def test_an_empty_argv_is_the_callers_mistake() -> None:
    with pytest.raises(InvalidRequest, match="non-empty"):
        ExecRequest.of([])


def test_the_request_round_trips_through_json() -> None:
    request = ExecRequest.of(["cat"], cwd="sub", env={"A": "1"}, stdin="x", timeout=2)
    assert ExecRequest.model_validate_json(request.model_dump_json()) == request


def test_a_request_hands_back_the_exec_keywords_it_was_made_of() -> None:
    # What a wrapper (spillover's tier, Ray placement) passes to an inner sandbox that implements only exec.
    request = ExecRequest.of(["cat"], cwd="sub", env={"A": "1"}, stdin="x", timeout=2)
    assert request.exec_keywords() == {"cwd": "sub", "env": {"A": "1"}, "stdin": "x", "timeout": 2}
    assert ExecRequest.of(request.command, **request.exec_keywords()) == request


class _Recorder(Sandbox):
    """A sandbox that implements only ``exec_request``: what every built-in backend does."""

    backend_name = "recorder"
    id = "rec-1"
    seen: list[ExecRequest]

    def __init__(self) -> None:
        self.seen = []

    async def exec_request(
        self, request: ExecRequest, *, on_stdout: object = None, on_stderr: object = None
    ) -> ExecResult:  # type: ignore[override]
        self.seen.append(request)
        return ExecResult(status=Status.OK, exit_code=0)

    async def run(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        raise NotImplementedError

    async def write_files(self, files: object) -> None:  # type: ignore[override]
        raise NotImplementedError

    async def read_files(self, paths: object) -> dict[str, bytes]:  # type: ignore[override]
        raise NotImplementedError

    async def alive(self) -> bool:
        return True

    async def close(self) -> None:
        return None


async def test_exec_checks_once_and_hands_the_backend_one_request() -> None:
    sandbox = _Recorder()
    await sandbox.exec(["ls", "-l"], cwd="d", env={"K": "v"}, stdin="in", timeout=3)
    assert sandbox.seen == [ExecRequest(command=["ls", "-l"], cwd="d", env={"K": "v"}, stdin="in", timeout_s=3.0)]
    with pytest.raises(InvalidRequest):
        await sandbox.exec("true", timeout=0)
    assert len(sandbox.seen) == 1  # refused before the backend saw it


def test_no_built_in_sandbox_redeclares_the_exec_keywords() -> None:
    """``exec``'s keyword list lives in ``Sandbox.exec`` alone; backends implement ``exec_request``."""
    from sandboxkit.backends._cloud_sandbox import CloudSandbox
    from sandboxkit.backends.docker import DockerSandbox
    from sandboxkit.backends.sandbox_fusion import SandboxFusionSandbox
    from sandboxkit.backends.subprocess import SubprocessSandbox
    from sandboxkit.distributed.placement import RaySandbox
    from sandboxkit.streaming import BufferedSandbox
    from sandboxkit.testing.fake import FakeSandbox

    classes: list[Any] = [
        SubprocessSandbox,
        DockerSandbox,
        BufferedSandbox,
        CloudSandbox,
        SandboxFusionSandbox,
        RaySandbox,
        FakeSandbox,
    ]
    redeclared = [cls.__name__ for cls in classes if cls.exec is not Sandbox.exec]
    assert not redeclared, f"these override Sandbox.exec instead of implementing exec_request: {redeclared}"


async def test_a_spillover_tier_hands_exec_on_with_its_keywords_and_callbacks() -> None:
    from sandboxkit import SandboxPool
    from sandboxkit.spillover import SpilloverBackend, Tier
    from sandboxkit.testing import FakeBackend

    async with SandboxPool(SpilloverBackend([Tier(FakeBackend(), cap=1)])) as pool:
        seen: list[bytes] = []
        result = await pool.exec("ok", cwd="sub", on_stdout=seen.append)
        assert result.status is Status.OK and b"".join(seen).decode() == result.stdout
        with pytest.raises(InvalidRequest, match=r"contains '\.\.'"):  # the cwd reached the tier's sandbox
            await pool.exec("ok", cwd="../outside")
