"""``RayPlacedBackend`` on a three-node local cluster: a head without CPUs and two 2-CPU nodes.

Each placed sandbox reserves one CPU, so where the sandboxes land is forced by capacity:
none on the head, both worker nodes used, a fifth waits until a CPU frees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from sandboxkit import SandboxPool
from sandboxkit.distributed import RayPlacedBackend
from sandboxkit.errors import InvalidRequest, SandboxCrashed
from sandboxkit.models import Limits, RunRequest, Status
from support.distributed import worker_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    import ray
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [nodes.add_node(num_cpus=2), nodes.add_node(num_cpus=2)]
    ray.init(address=nodes.address, runtime_env=worker_env(), log_to_driver=False, logging_level="ERROR")
    try:
        nodes.wait_for_nodes()
        yield {"head": nodes.head_node.node_id, "workers": {w.node_id for w in workers}}
    finally:
        ray.shutdown()
        nodes.shutdown()


async def test_sandboxes_run_on_the_nodes_that_have_free_cpus(cluster: dict[str, Any]) -> None:
    import ray

    backend = RayPlacedBackend("subprocess", num_cpus=1)
    sandboxes = await asyncio.gather(*(backend.open(Limits(timeout_s=10)) for _ in range(4)))
    try:
        nodes = [sb.node_id for sb in sandboxes]
        assert cluster["head"] not in nodes  # the head has no CPU to give
        assert set(nodes) == cluster["workers"]  # 4 one-CPU sandboxes need both 2-CPU nodes
        results = await asyncio.gather(*(sb.run(RunRequest(code="print(6 * 7)")) for sb in sandboxes))
        assert [(r.status, r.stdout) for r in results] == [(Status.OK, "42\n")] * 4
        fifth = asyncio.create_task(backend.open())
        await asyncio.sleep(1.0)
        assert not fifth.done()  # every CPU is reserved: the fifth sandbox queues
        await sandboxes[0].close()
        extra = await asyncio.wait_for(fifth, 60)
        assert extra.node_id == nodes[0]  # it took the CPU that was freed
        sandboxes[0] = extra
    finally:
        await asyncio.gather(*(sb.close() for sb in sandboxes))
        await backend.aclose()
    for _ in range(100):
        if ray.available_resources().get("CPU", 0) == 4:
            break
        await asyncio.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 4  # closing gave every CPU back


async def test_files_state_and_errors_cross_the_actor_boundary(cluster: dict[str, Any]) -> None:
    backend = RayPlacedBackend("subprocess", num_cpus=1)
    sandbox = await backend.open()
    try:
        await sandbox.write_files({"data/in.txt": "hello"})
        result = await sandbox.exec("cat data/in.txt && echo more >> data/in.txt")
        assert result.stdout == "hello"
        assert (await sandbox.read_files(["data/in.txt", "missing"])) == {"data/in.txt": b"hellomore\n"}
        with pytest.raises(InvalidRequest):
            await sandbox.exec("true", cwd="../outside")  # raised on the far node, same type here
        assert await sandbox.alive()
        import ray

        ray.kill(sandbox._host)
        with pytest.raises(SandboxCrashed):
            await sandbox.exec("true")
        assert not await sandbox.alive()
    finally:
        await sandbox.close()
        await backend.aclose()


async def test_a_pool_with_the_ray_limiter_grades_on_the_cluster(cluster: dict[str, Any]) -> None:
    backend = RayPlacedBackend("subprocess", num_cpus=1)
    assert "python" in backend.capabilities.languages
    async with SandboxPool(backend, max_concurrency=4, limiter="ray") as pool:
        programs = [{"code": f"print({i} * {i})", "language": "python"} for i in range(8)]
        results = await pool.run_many(programs)
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(8)]  # type: ignore[union-attr]


def _docker_usable() -> tuple[bool, str]:
    try:
        from sandboxkit.backends.docker import DockerBackend
    except ImportError as exc:
        return False, str(exc)
    availability = DockerBackend.availability()
    return availability.usable, availability.reason


@pytest.mark.docker
async def test_docker_sandboxes_are_placed_too_and_leave_nothing_behind(cluster: dict[str, Any]) -> None:
    import os
    import uuid

    usable, why = _docker_usable()
    if not usable and os.environ.get("CI") != "true":
        pytest.skip(f"{why} (CI=true turns this skip into a failure)")
    import docker

    labels = {"sandboxkit.test": f"placement-{uuid.uuid4().hex[:8]}"}
    backend = RayPlacedBackend("docker", {"labels": labels}, num_cpus=1)
    async with SandboxPool(backend, max_concurrency=2, limiter="ray") as pool:
        results = await pool.run_many([{"code": "import sys; print(sys.version_info[0])"}] * 2)
        assert [r.stdout for r in results] == ["3\n", "3\n"]  # type: ignore[union-attr]
    client = docker.from_env()
    try:
        label = f"sandboxkit.test={labels['sandboxkit.test']}"
        assert client.containers.list(all=True, filters={"label": label}) == []
    finally:
        client.close()
