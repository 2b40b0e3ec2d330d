"""Marks shared by every test folder."""

from __future__ import annotations

import os
from types import ModuleType
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


def verl_reward_score() -> ModuleType:
    """verl's ``verl.utils.reward_score`` package, imported when a test needs it.

    verl (and the torch it imports) installs on the main Python only, so the server's tests that drive verl's
    client import it here: on the other Pythons the rest of their module still runs.
    """
    try:
        import verl.utils.reward_score as reward_score
        import verl.utils.reward_score.sandbox_fusion  # noqa: F401  (the submodule the tests call)
    except ImportError:
        missing("verl, installed by the [verl] extra on the main Python")
    return reward_score
