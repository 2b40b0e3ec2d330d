"""Exactly-once commands on the Daytona backend, through connections its fake cuts (tests/fakes/once_tests.py)."""

from __future__ import annotations

from fakes.once_tests import ExactlyOnceBehaviour


class TestDaytonaExactlyOnce(ExactlyOnceBehaviour):
    """The shared behaviour, with this directory's ``fake`` and ``make_backend`` fixtures."""
