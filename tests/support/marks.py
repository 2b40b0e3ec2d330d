"""Marks shared by every test folder."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def requires(available: bool, reason: str) -> pytest.MarkDecorator:
    """Skip when a component is missing locally, but run (and fail) under CI=true, where CI installs it."""
    if available or os.environ.get("CI") == "true":
        return pytest.mark.skipif(False, reason="")
    return pytest.mark.skip(reason=f"{reason} (CI=true turns this skip into a failure)")


def missing(reason: str) -> NoReturn:
    """At run time: skip for a component missing locally, fail under CI=true, where CI installs it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI installs it, so under CI=true this is a failure)")
    pytest.skip(f"{reason} (CI=true turns this skip into a failure)")
