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


async def test_a_pause_the_engine_cannot_finish_leaves_the_session_running(
    docker_client: Any, monkeypatch: Any
) -> None:
    """Under load ``docker pause`` can fail half way ("OCI runtime pause failed: unable to freeze").

    That is the engine's trouble, not the program's: suspend answers False (nothing suspended, as on a backend
    that cannot), the container is left running, and the session keeps working; it is not a crashed sandbox.
    The engine's refusal is injected after a real pause, so the container really was frozen when it came.
    """
    import docker.api.client
    import docker.errors

    real_pause = docker.api.client.APIClient.pause

    def pause_then_fail(self: Any, container: str) -> None:
        real_pause(self, container)
        raise docker.errors.APIError("500 Server Error: OCI runtime pause failed: unable to freeze: unknown")

    async with SandboxPool("docker", max_concurrency=1) as pool, pool.session() as session:
        await session.python("x = 41")
        monkeypatch.setattr(docker.api.client.APIClient, "pause", pause_then_fail)
        assert await session.suspend() is False
        assert docker_client.api.inspect_container(session.sandbox_id)["State"]["Paused"] is False
        assert (await session.python("print(x + 1)")).stdout == "42\n"
