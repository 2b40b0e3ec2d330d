"""A backend that does nothing, so a benchmark measures only the layers above it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sandboxkit import Backend, Capabilities, ExecResult, Limits, RunRequest, RunResult, Sandbox, Status

_RESULT = RunResult(status=Status.OK, exit_code=0, stdout="1\n", backend="noop", sandbox_id="noop")


class NoopSandbox(Sandbox):
    id = "noop"
    backend_name = "noop"

    async def run(self, request: RunRequest) -> RunResult:
        return _RESULT

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        return _RESULT

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        return None

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        return {}

    async def alive(self) -> bool:
        return True

    async def reset(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class NoopBackend(Backend):
    name = "noop"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=frozenset({"python"}))

    async def open(self, limits: Limits | None = None) -> Sandbox:
        return NoopSandbox()
