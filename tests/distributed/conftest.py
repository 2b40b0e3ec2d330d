"""A local Ray cluster per test module (CPU only), with this directory importable by its workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.distributed import worker_env


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
        # Limiter actors are detached (they outlive jobs on a real cluster): remove ours first.
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == "sandboxkit":
                ray.kill(ray.get_actor(entry["name"], namespace="sandboxkit"), no_restart=True)
        ray.shutdown()
