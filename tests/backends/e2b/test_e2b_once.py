"""Exactly-once commands on the E2B backend, through connections its fake cuts (tests/fakes/once_tests.py)."""

from __future__ import annotations

from fakes.once_tests import ExactlyOnceBehaviour


class TestE2BExactlyOnce(ExactlyOnceBehaviour):
    """The shared behaviour, with this directory's ``fake`` and ``make_backend`` fixtures."""
