"""The conformance suite on the subprocess backend."""

from __future__ import annotations

from typing import ClassVar

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.base import Backend
from sandboxkit.testing import BackendConformance


class TestSubprocessConformance(BackendConformance):
    backend_name = "subprocess"
    xfail: ClassVar[dict[str, str]] = {
        "test_planted_stdlib_modules_and_killed_helpers_do_not_hijack_the_session": "issue 20: fixed by subproc branch",
        "test_planted_modules_do_not_hijack_later_pooled_runs": "issue 20: fixed by subproc branch",
        "test_no_state_survives_into_the_next_pooled_run": "issue 20: fixed by subproc branch",
        "test_a_fifo_in_place_of_the_next_program_does_not_freeze_the_host": "issue 20: fixed by subproc branch",
        "test_long_output_keeps_head_and_tail_and_the_program_runs_on": (
            "issue 18 item 2 (head+tail, no kill at output_bytes): fixed by subproc branch"
        ),
    }

    async def live_sandboxes(self, backend: Backend) -> int | None:
        assert isinstance(backend, SubprocessBackend)
        return backend.live_sandboxes
