"""Shared fixtures. ``tests/`` is on sys.path (pytest ``pythonpath``), so helpers import as ``support.<topic>``.

Where test code lives:

* ``tests/support/<topic>.py``: every helper module (backends that record or fail on purpose,
  subprocess/engine leak checks, ``sandboxkit serve`` as a process, availability marks). One
  place and one naming scheme, imported as ``from support.<topic> import ...``.
* ``tests/fakes/``: loopback fakes of external services (Daytona, E2B) driven by their real SDKs.
* ``sandboxkit.testing``: what ships to users (the conformance suite, ``FakeBackend``).
"""

from __future__ import annotations

import pytest

UPSTREAM = "sandbox_fusion_upstream"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sandbox-fusion-upstream",
        action="store_true",
        help="Also run Sandbox Fusion's own tests (tests/fidelity/test_sandbox_fusion_suite.py): they need its source "
        "tree, which no package registry serves, so the README's command leaves them out and .ci/run adds them.",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (visibly: "N deselected") Sandbox Fusion's own tests unless asked for: a fresh machine cannot get
    their source from a registry, while CI, which has the mirror, runs them by name and fails without it."""
    if config.getoption("--sandbox-fusion-upstream"):
        return
    keep = [item for item in items if item.get_closest_marker(UPSTREAM) is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker(UPSTREAM) is not None])
        items[:] = keep
