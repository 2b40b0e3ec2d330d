"""What every conformance test class shares: the hooks a backend's test module sets, and fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.models import Limits, RunRequest
from sandboxkit.registry import backend as make_backend

#: Seconds a backend may take beyond a run's timeout to report it (host-side grace + transport).
TIMEOUT_GRACE_S = 5.0


class ConformanceBase:
    """Hooks and fixtures; the tests live in the mixins that :class:`BackendConformance` joins."""

    backend_name: ClassVar[str] = ""
    backend_options: ClassVar[dict[str, Any]] = {}
    #: test name -> reason; those tests are marked ``xfail(strict=True)`` (they must keep failing).
    xfail: ClassVar[dict[str, str]] = {}
    #: Limits used by the suite's sandboxes; short timeouts keep the suite fast.
    limits: ClassVar[Limits] = Limits(timeout_s=5.0, output_bytes=64 * 1024)
    #: ``False`` when the programs run *unsandboxed* on the test machine (a loopback fake of a
    #: cloud service): the tests whose programs attack the sandbox, or need its isolation to
    #: hold (network off), then skip instead of attacking the machine running the tests.
    contained: ClassVar[bool] = True

    # ------------------------------------------------------------------ hooks

    async def create_backend(self) -> Backend:
        """Build the backend under test (override when it needs a fixture)."""
        assert self.backend_name, "set backend_name on the conformance subclass"
        return make_backend(self.backend_name, **self.backend_options)

    async def live_sandboxes(self, backend: Backend) -> int | None:
        """How many sandboxes the backend still has alive (``None``: cannot tell; the leak test xfails)."""
        return None

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture(autouse=True)
    def _conformance_xfail(self, request: pytest.FixtureRequest) -> None:
        name = getattr(request.node, "originalname", request.node.name)
        if name in self.xfail:
            request.applymarker(pytest.mark.xfail(reason=self.xfail[name], strict=True))

    @pytest.fixture
    async def backend(self) -> AsyncIterator[Backend]:
        b = await self.create_backend()
        try:
            yield b
        finally:
            await b.aclose()

    @pytest.fixture
    async def sandbox(self, backend: Backend) -> AsyncIterator[Sandbox]:
        sb = await backend.open(self.limits)
        try:
            yield sb
        finally:
            await sb.close()

    def request(self, code: str, **kw: Any) -> RunRequest:
        """A python :class:`RunRequest` with the suite's limits unless ``limits=`` is given."""
        kw.setdefault("limits", self.limits)
        return RunRequest(code=code, **kw)

    def require_contained(self) -> None:
        """Skip a test whose program attacks the sandbox when programs run on the test machine."""
        if not self.contained:
            pytest.skip("programs run unsandboxed on the test machine here (contained=False)")
