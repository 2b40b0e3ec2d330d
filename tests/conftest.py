"""Shared fixtures. ``tests/`` is on sys.path (pytest ``pythonpath``) so ``support`` imports work."""

from __future__ import annotations

import os

import pytest


def requires(available: bool, reason: str) -> pytest.MarkDecorator:
    """Skip when a component is missing locally, but fail under CI=true, where CI installs it."""
    if available:
        return pytest.mark.skipif(False, reason="")
    if os.environ.get("CI") == "true":
        return pytest.mark.skipif(False, reason="")  # run it, and let it fail loudly in CI
    return pytest.mark.skip(reason=f"{reason} (CI=true turns this skip into a failure)")
