"""Conformance on images without a language's toolchain: such a test skips, and says why.

A conformance class that sets ``skip_missing_toolchains = True`` runs on an image that lacks
some languages (the busybox-only image has no Python at all). A test whose program needs one
of them raises :class:`~sandboxkit.errors.ToolchainMissing`, which is the backend's honest
answer; the test is then reported as skipped with that message instead of failed. Any other
error still fails, and so does ToolchainMissing in every other class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sandboxkit.errors import ToolchainMissing


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    cls = getattr(item, "cls", None)
    if (
        call.excinfo is not None
        and call.when == "call"
        and getattr(cls, "skip_missing_toolchains", False)
        and call.excinfo.errisinstance(ToolchainMissing)
    ):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")
