"""Absolute paths on a real engine: files at ``/testbed``, ``/tests``, ``/logs`` that programs see too.

One container per module (module-scoped, with ``writable_root=True``) keeps this cheap; the
read-only default gets its own short check.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Status
from support.docker_engine import FAST, TEST_LABEL, leftovers

pytestmark = pytest.mark.asyncio(loop_scope="module")
LABELS = {TEST_LABEL: f"abspath-{uuid.uuid4().hex[:8]}"}

REWARD_SH = """#!/bin/sh
# A Harbor-style verifier: check the agent's answer, write the reward where the evaluator reads it.
mkdir -p /logs/verifier
if [ "$(cat /testbed/answer.txt)" = "42" ]; then echo 1.0 > /logs/verifier/reward.txt; else echo 0.0 > /logs/verifier/reward.txt; fi
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def writable() -> AsyncIterator[Any]:
    import docker

    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=LABELS, writable_root=True, writable_dirs=("/testbed", "/logs/verifier"))
    sb = await backend.open(FAST)
    try:
        yield sb
    finally:
        await sb.close()
        await backend.aclose()
        client = docker.from_env()
        try:
            assert leftovers(client, LABELS) == (0, 0)
        finally:
            client.close()


async def test_a_program_opens_an_absolute_path_written_by_the_host(writable: Any) -> None:
    await writable.write_files({"/testbed/x.txt": "from the host"})
    result = await writable.exec("python3 -c \"print(open('/testbed/x.txt').read())\"")
    assert result.status is Status.OK, result
    assert result.stdout == "from the host\n"
    assert await writable.read_files(["/testbed/x.txt"]) == {"/testbed/x.txt": b"from the host"}


async def test_tests_script_writes_the_reward_the_evaluator_reads(writable: Any) -> None:
    await writable.write_files({"/tests/test.sh": REWARD_SH, "/testbed/answer.txt": "42"})
    result = await writable.exec("sh /tests/test.sh", cwd="/testbed")
    assert result.status is Status.OK, result
    reward = await writable.read_files(["/logs/verifier/reward.txt"])
    assert float(reward["/logs/verifier/reward.txt"]) == 1.0
    await writable.write_files({"/testbed/answer.txt": "41"})
    await writable.exec("sh /tests/test.sh")
    assert float((await writable.read_files(["/logs/verifier/reward.txt"]))["/logs/verifier/reward.txt"]) == 0.0


async def test_absolute_cwd_and_created_parents_belong_to_the_program(writable: Any) -> None:
    await writable.write_files({"/deep/new/dir/f.txt": "x"})
    result = await writable.exec("pwd; touch made-by-program && ls", cwd="/deep/new")
    assert result.status is Status.OK, result
    assert result.stdout.splitlines()[0] == "/deep/new"
    assert "made-by-program" in result.stdout


async def test_absolute_path_inside_the_workspace_is_the_workspace_file(writable: Any) -> None:
    await writable.write_files({"/work/w.txt": "ws"})
    assert (await writable.exec("cat w.txt")).stdout == "ws"
    assert await writable.read_files(["/work/w.txt", "w.txt"]) == {"/work/w.txt": b"ws", "w.txt": b"ws"}


async def test_symlink_to_etc_resolves_inside_the_container(writable: Any) -> None:
    # A planted link to /etc names the container's /etc (the engine resolves in its root), never the host's.
    await writable.exec("ln -sfn /etc /testbed/etc-link && echo sandboxed-host > /tmp/h")
    got = await writable.read_files(["/testbed/etc-link/hostname"])
    assert got["/testbed/etc-link/hostname"].strip() == b"sandbox"
    assert got["/testbed/etc-link/hostname"].strip() != Path("/etc/hostname").read_bytes().strip()


@pytest.mark.parametrize("bad", ["/testbed/../etc/passwd", "/a/../../b", "/tmp/x", "/proc/self/environ", "/", "/a\x00"])
async def test_escapes_and_private_mounts_are_invalid(writable: Any, bad: str) -> None:
    with pytest.raises(InvalidRequest):
        await writable.write_files({bad: "x"})
    with pytest.raises(InvalidRequest):
        await writable.read_files([bad])


async def test_writable_dirs_need_a_writable_root_and_absolute_paths() -> None:
    from sandboxkit.backends.docker import DockerBackend

    for bad, root in (((" /x",), True), (("/a/../b",), True), (("/tmp/x",), True), (("/x",), False), ("/x", True)):
        with pytest.raises(InvalidRequest):
            DockerBackend(writable_root=root, writable_dirs=bad)


async def test_read_only_root_says_how_to_write_outside_the_workspace(sandbox: Any) -> None:
    with pytest.raises(InvalidRequest, match="writable_root=True"):
        await sandbox.write_files({"/tests/t.sh": "x"})
    # Reading absolute paths and an absolute cwd need no writable root.
    assert b"root:" in (await sandbox.read_files(["/etc/passwd"]))["/etc/passwd"]
    assert (await sandbox.exec("pwd", cwd="/")).stdout == "/\n"
    assert await sandbox.read_files(["/nonexistent/file"]) == {}
    # A missing directory as cwd is the caller's error, and the sandbox stays usable.
    for bad in ("/no/such/dir", "/etc/passwd"):
        with pytest.raises(InvalidRequest, match="not a directory"):
            await sandbox.exec("pwd", cwd=bad)
    assert (await sandbox.exec("pwd", cwd="/usr/bin")).stdout == "/usr/bin\n"
    assert await sandbox.alive()
