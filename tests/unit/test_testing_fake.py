"""The shipped FakeBackend: its scripted behaviours, and its fidelity to the real contract.

A fake that drifts from the contract lets adapter tests pass against behaviour no backend has,
so the fake runs the same conformance suite as the real backends: every test that does not need
code to execute must pass (the strict xfails below are exactly those that need execution).
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from sandboxkit import SandboxPool, Status
from sandboxkit.base import Backend
from sandboxkit.errors import CapacityExceeded, RateLimited, SandboxCrashed, Transient
from sandboxkit.models import RunRequest, RunResult
from sandboxkit.testing import BackendConformance, FakeBackend

_EXECUTES = "FakeBackend executes no code: its programs are scripts of behaviours"
#: Conformance tests that need a real interpreter; each must fail on the fake (strict xfail).
NEEDS_EXECUTION = (
    "test_run_ok",
    "test_run_nonzero_exit_is_failed",
    "test_exception_is_a_result_not_an_error",
    "test_stdin_and_stderr",
    "test_files_in_and_out",
    "test_timeout",
    "test_invalid_utf8_output",
    "test_output_is_byte_exact_without_a_newline",
    "test_nul_and_invalid_utf8_bytes_decode_like_decode_output",
    "test_parent_environment_not_visible",
    "test_request_env_is_visible",
    "test_exec_shell_and_argv",
    "test_exec_stdin_and_timeout",
    "test_stateful_files",
    "test_reset_wipes_workspace",
    "test_exec_cwd_inside_the_workspace_is_used",
    "test_pool_run_many_in_order",
    "test_pool_reuse_does_not_leak_state",
    "test_planted_modules_do_not_hijack_later_pooled_runs",
    "test_no_state_survives_into_the_next_pooled_run",
    "test_planted_stdlib_modules_and_killed_helpers_do_not_hijack_the_session",
    "test_a_fifo_in_place_of_the_next_program_does_not_freeze_the_host",
    "test_signalling_pid1_and_the_parent_gives_a_result_or_crash_never_a_hang",
    # streaming: the fake's "output" is its command text, so these programs' output never appears
    "test_stream_exec_both_streams_equal_the_result",
    "test_stream_run_gets_the_program_output",
    "test_stream_long_output_raw_chunks_before_the_cut",
    "test_stream_callback_that_raises_loses_nothing",
    "test_stream_through_pool_and_session",
    # blame: the judge grades real programs (the fake's "program" never reads its stdin)
    "test_a_wrong_program_that_attacks_its_grading_never_passes",
    "test_a_solution_cannot_change_the_interactor",
)


class TestFakeBackendConformance(BackendConformance):
    backend_name = "fake"
    xfail: ClassVar[dict[str, str]] = dict.fromkeys(NEEDS_EXECUTION, _EXECUTES)

    async def create_backend(self) -> Backend:
        return FakeBackend()

    async def live_sandboxes(self, backend: Backend) -> int | None:
        assert isinstance(backend, FakeBackend)
        return len(backend.live)


async def test_scripted_behaviours() -> None:
    backend = FakeBackend()
    sb = await backend.open()
    assert (await sb.run(RunRequest(code="ok"))).stdout == "ok"
    failed = await sb.run(RunRequest(code="fail"))
    assert (failed.status, failed.exit_code) == (Status.FAILED, 1)
    for code, error in (("transient:1", Transient), ("ratelimit:1", RateLimited), ("crash", SandboxCrashed)):
        with pytest.raises(error):
            await sb.run(RunRequest(code=code))
    assert (await sb.run(RunRequest(code="transient:1"))).status is Status.OK, "only the first attempt fails"
    assert backend.attempts["transient:1"] == 2
    assert not await sb.alive(), "a crashed sandbox reports itself dead"
    await sb.close()


async def test_scripted_responses_and_fetched_files() -> None:
    canned = RunResult(status=Status.TIMEOUT, stdout="late")
    backend = FakeBackend(
        responses={
            "canned": canned,
            "boom": Transient("scripted"),
            "echo-stdin": lambda request: RunResult(status=Status.OK, stdout=request.stdin or ""),
        }
    )
    async with SandboxPool(backend, retries=0) as pool:
        assert await pool.run("canned") == canned
        assert (await pool.run("echo-stdin", stdin="in")).stdout == "in"
        with pytest.raises(Transient):
            await pool.run("boom")
        got = await pool.run("ok", files={"a.txt": "x"}, fetch_files=["a.txt", "b.txt"])
        assert got.files == {"a.txt": b"x"}


async def test_capacity_refuses_with_capacity_exceeded_and_records_peaks() -> None:
    backend = FakeBackend(capacity=2)
    first, second = await backend.open(), await backend.open()
    with pytest.raises(CapacityExceeded) as info:
        await backend.open()
    assert info.value.limit == 2 and "2" in str(info.value)
    assert backend.capacity_refusals == 1 and backend.peak_live == 2
    await first.close()
    third = await backend.open()
    assert len(backend.live) == 2
    for sb in (second, third):
        await sb.close()
    assert not backend.live


async def test_slow_opens_and_open_failures() -> None:
    backend = FakeBackend(open_delay_s=0.05, open_failures=1)
    with pytest.raises(Transient):
        await backend.open()
    sb = await backend.open()
    assert backend.opens_attempted == 2 and len(backend.created_at) == 1
    await sb.close()
