"""Helpers shared by the Docker backend tests (``support.docker_engine``)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any

from sandboxkit.models import Limits

TEST_LABEL = "sandboxkit.test"
#: Short timeouts keep the suite fast; memory small enough that bombs hit it quickly.
FAST = Limits(timeout_s=5.0, compile_timeout_s=60.0, memory_mb=256, pids=64, output_bytes=1 << 20)


@functools.cache
def engine_status() -> tuple[bool, str]:
    """Whether the Docker backend can run here, and why not."""
    try:
        from sandboxkit.backends.docker import DockerBackend
    except ImportError as exc:
        return False, f"the docker backend cannot be imported: {exc}"
    availability = DockerBackend.availability()
    return availability.usable, availability.reason


def leftovers(client: Any, labels: dict[str, str]) -> tuple[int, int]:
    """(containers, volumes) that still carry ``labels``."""
    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    containers = client.api.containers(all=True, filters=filters)
    volumes = (client.api.volumes(filters=filters) or {}).get("Volumes") or []
    return len(containers), len(volumes)


def processes(client: Any, container_id: str) -> list[list[str]]:
    """The processes running in a container, as ``docker top`` lists them."""
    return list(client.api.top(container_id)["Processes"])


def containers_of(client: Any, labels: dict[str, str]) -> list[str]:
    """Ids of running containers carrying ``labels``."""
    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    return [c["Id"] for c in client.api.containers(filters=filters)]


@functools.cache
def static_runner_status() -> tuple[bool, str]:
    """Whether the static runner can be had here (built with Go, cached, or ``SANDBOXKIT_RUNNER_BIN``)."""
    from sandboxkit.backends.docker._static import StaticRunnerUnavailable, static_runner

    try:
        static_runner()
    except StaticRunnerUnavailable as exc:
        return False, str(exc)
    return True, "static runner available"


def require_static_runner() -> None:
    """Skip (locally) or fail (under ``CI=true``) when there is no static runner."""
    import os

    import pytest

    usable, why = static_runner_status()
    if not usable:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(f"{why} (CI=true turns this skip into a failure)")


def run_cleanup_cli(labels: dict[str, str], *args: str, **extra_env: str) -> str:
    """``sandboxkit cleanup --backend docker [args]`` in a child process scoped to ``labels``; its stdout."""
    env = {**os.environ, **extra_env, "SANDBOXKIT_DOCKER_LABELS": ",".join(f"{k}={v}" for k, v in labels.items())}
    done = subprocess.run(
        [sys.executable, "-m", "sandboxkit.cli", "cleanup", "--backend", "docker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done
    return done.stdout
