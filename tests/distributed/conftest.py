"""A local Ray cluster per test module (CPU only), with this directory importable by its workers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = str(Path(__file__).resolve().parent)


def worker_env() -> dict[str, Any]:
    """Runtime env that lets Ray workers import ``_backend`` from this directory."""
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """``ray.init`` on this machine for the module's tests; shut down (every actor with it) at the end."""
    import ray  # the [ray] extra is installed in dev and CI: a missing Ray fails here, it does not skip

    ray.init(
        num_cpus=4,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        namespace="sandboxkit-tests",
        runtime_env=worker_env(),
    )
    try:
        yield ray
    finally:
        ray.shutdown()
