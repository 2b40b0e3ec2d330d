"""Suspend and resume of a Docker session: ``docker pause`` between calls; files and kernel state survive."""

from __future__ import annotations

from typing import Any

from sandboxkit import SandboxPool


async def test_suspended_container_is_paused_and_keeps_its_state(docker_client: Any) -> None:
    async with SandboxPool("docker", max_concurrency=2) as pool, pool.session() as session:
        await session.write_files({"kept.txt": "hello"})
        await session.python(
            "import threading, time\nx = 41\nt = threading.Thread(target=time.sleep, args=(1000,))\nt.start()"
        )
        assert session.capabilities.suspend == "files+memory"
        assert await session.suspend() is True
        container = docker_client.api.inspect_container(session.sandbox_id)
        assert container["State"]["Paused"] is True, "a suspended Docker session must be paused"
        result = await session.python("print(x + 1, t.is_alive())")  # resumes by itself
        assert result.stdout.split() == ["42", "True"]
        assert docker_client.api.inspect_container(session.sandbox_id)["State"]["Paused"] is False
        assert (await session.read_files(["kept.txt"]))["kept.txt"] == b"hello"
