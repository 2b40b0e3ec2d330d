"""One test per ``Raises:`` entry of :class:`sandboxkit.base.Sandbox` that a backend can be driven into.

The abstract methods document which error each misuse raises; these tests hold every backend to
those lists, so a caller (the pool, an adapter) can rely on them: a caller's mistake is an
:class:`~sandboxkit.errors.InvalidRequest` (never retried, never a crash), a sandbox that is gone
is :class:`~sandboxkit.errors.SandboxCrashed` (the pool discards it), never a raw ``OSError``,
``KeyError`` or a hang. Errors a backend cannot be driven into from outside (``Transient``,
``RateLimited``) are covered by each backend's fault tests.
"""

from __future__ import annotations

import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.errors import InvalidRequest, SandboxCrashed, ToolchainMissing
from sandboxkit.languages import LANGUAGES
from sandboxkit.models import Limits, RunRequest, Status
from sandboxkit.testing.conformance._base import ConformanceBase

#: Paths that name something outside the workspace (or nothing at all).
BAD_PATHS = ("../escape.txt", "/etc/passwd", "a/../../b", "", "a\x00b", "..")


class ContractTests(ConformanceBase):
    """Declared capabilities and documented errors."""

    async def test_capabilities_declared(self, backend: Backend) -> None:
        caps = backend.capabilities
        assert backend.name
        assert "python" in caps.languages, "every backend must run python (the judge and adapters rely on it)"
        unknown = caps.languages - set(LANGUAGES)
        assert not unknown, f"languages {sorted(unknown)!r} are not sandboxkit languages (see sandboxkit.languages)"
        bogus = caps.limits - set(Limits.model_fields)
        assert not bogus, f"limits {sorted(bogus)!r} are not fields of sandboxkit.Limits"
        assert "timeout_s" in caps.limits, "the wall timeout is always enforced (docs/architecture.md)"
        for flag in (caps.stateful, caps.network_control, caps.resettable):
            assert isinstance(flag, bool)

    # ------------------------------------------------------------------ Sandbox.run

    async def test_run_unsupported_language_is_invalid_request(self, backend: Backend, sandbox: Sandbox) -> None:
        missing = sorted(set(LANGUAGES) - backend.capabilities.languages)
        if not missing:
            pytest.skip("backend declares every sandboxkit language")
        # A language left out because its toolchain is not installed (julia, swift... on a subprocess backend)
        # may say so instead: ToolchainMissing names what to install, which helps more than "not supported".
        with pytest.raises((InvalidRequest, ToolchainMissing)) as info:
            await sandbox.run(RunRequest(code="", language=missing[0], limits=self.limits))
        assert missing[0] in str(info.value)

    # ------------------------------------------------------------------ Sandbox.exec

    async def test_exec_cwd_escaping_the_workspace_is_invalid_request(self, backend: Backend, sandbox: Sandbox) -> None:
        absolute = backend.capabilities.absolute_paths  # then /etc is the sandbox's own, and valid
        for bad in ("..", "../..", "a/../../b", "/etc/../..", *(() if absolute else ("/etc",))):
            with pytest.raises(InvalidRequest):
                await sandbox.exec("pwd", cwd=bad)

    async def test_exec_cwd_inside_the_workspace_is_used(self, backend: Backend, sandbox: Sandbox) -> None:
        if not backend.capabilities.stateful:
            pytest.skip("stateless backend: a directory written by one call is gone in the next")
        await sandbox.write_files({"sub/dir/f.txt": "here"})
        result = await sandbox.exec("cat f.txt", cwd="sub/dir")
        assert result.status is Status.OK, result
        assert result.stdout == "here"

    @pytest.mark.parametrize("timeout", [0, -1.0])
    async def test_exec_non_positive_timeout_is_invalid_request(self, sandbox: Sandbox, timeout: float) -> None:
        with pytest.raises(InvalidRequest) as info:
            await sandbox.exec("true", timeout=timeout)
        assert repr(timeout) in str(info.value) or str(timeout) in str(info.value)

    # ------------------------------------------------------------------ files

    async def test_bad_paths_are_invalid_requests(self, backend: Backend, sandbox: Sandbox) -> None:
        absolute = backend.capabilities.absolute_paths
        for bad in (*BAD_PATHS, "/etc/../etc/passwd", "/"):
            if absolute and bad == "/etc/passwd":
                continue  # the sandbox's own /etc/passwd: a valid path there (see the absolute-path tests)
            with pytest.raises(InvalidRequest):
                await sandbox.write_files({bad: "x"})
            with pytest.raises(InvalidRequest):
                await sandbox.read_files([bad])

    async def test_absolute_paths_name_the_sandboxs_own_files(self, backend: Backend, sandbox: Sandbox) -> None:
        if not backend.capabilities.absolute_paths:
            pytest.skip("backend declares no absolute paths (capabilities.absolute_paths=False)")
        if not backend.capabilities.stateful:
            pytest.skip("stateless backend: a file written by one call is gone in the next")
        here = (await sandbox.exec("pwd")).stdout.strip()
        assert here.startswith("/"), here
        await sandbox.write_files({f"{here}/abs.txt": "abs"})
        assert (await sandbox.read_files(["abs.txt"])) == {"abs.txt": b"abs"}
        assert (await sandbox.read_files([f"{here}/abs.txt"])) == {f"{here}/abs.txt": b"abs"}
        result = await sandbox.exec("cat abs.txt; pwd", cwd=here)
        assert result.stdout == f"abs{here}\n", result
        assert (await sandbox.exec("pwd", cwd="/")).stdout == "/\n"

    # ------------------------------------------------------------------ kernels

    async def test_open_kernel_follows_capabilities(self, backend: Backend) -> None:
        """``open_kernel`` works where ``capabilities.kernels`` says so, else is an InvalidRequest."""
        sb = await backend.open(self.limits)
        try:
            if not backend.capabilities.kernels:
                with pytest.raises(InvalidRequest):
                    await sb.open_kernel()
                return
            kernel = await sb.open_kernel()
            assert (await kernel.run("kept = 20")).ok
            result = await kernel.run("kept + 1")
            assert result.ok and result.value == "21", result
        finally:
            await sb.close()
        if backend.capabilities.kernels:
            with pytest.raises(SandboxCrashed):
                await sb.open_kernel()

    # ------------------------------------------------------------------ after close

    async def test_calls_after_close_raise_sandbox_crashed(self, backend: Backend) -> None:
        sb = await backend.open(self.limits)
        await sb.close()
        with pytest.raises(SandboxCrashed):
            await sb.run(self.request("print(1)"))
        with pytest.raises(SandboxCrashed):
            await sb.exec("true")
        with pytest.raises(SandboxCrashed):
            await sb.write_files({"a.txt": "x"})
        with pytest.raises(SandboxCrashed):
            await sb.read_files(["a.txt"])
        assert await sb.alive() is False
        assert await sb.reset() is False, "a closed sandbox cannot be made reusable"
