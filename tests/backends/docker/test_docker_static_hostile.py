"""The hostile suite again, with the static runner as PID 1 of every container.

The tests are the same functions (imported); the autouse fixture below makes every
``DockerBackend`` they build use ``runner="static"``. Tests about what a program inherits from
the Python runner's memory skip themselves here (test_docker_static.py reads the static
runner's memory from the host instead).
"""

from __future__ import annotations

import pytest
from test_docker_hostile import *  # noqa: F403

from sandboxkit.backends.docker._backend import RUNNER_ENV
from support.docker_engine import require_static_runner


@pytest.fixture(autouse=True)
def _static_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    require_static_runner()
    monkeypatch.setenv(RUNNER_ENV, "static")
