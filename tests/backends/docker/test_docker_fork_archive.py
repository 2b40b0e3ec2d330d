"""What a Docker checkpoint's archive holds: links that climb out of the workspace, sparse files, its size bound.

The engine's ``put_archive`` refuses a relative symlink whose target leaves the directory it
unpacks into, so one ``l -> ../../etc/hostname`` in a workspace used to make every fork of it
(and every warm container it was loaded into) fail. The engine's ``get_archive`` writes sparse
files dense, so a workspace holding one ``truncate -s 200M`` file cost 200 MB of host temp disk
per checkpoint. A checkpoint is the program's own files: what it makes of them is its outcome.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit import SandboxPool
from sandboxkit.backends.docker._fork import ArchiveSnapshot
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Status
from support.docker_engine import FAST, leftovers, require_static_runner

#: Sparse files may be larger than FAST's 64 MB file size limit (they take no space).
BIG_FILES = FAST.model_copy(update={"file_size_mb": 1024})
_LINKS = (
    "mkdir -p a/b ro && echo data > x && ln -s ../../../../etc/hostname up && ln -s ../../x a/b/back "
    "&& ln -s ../../../.. a/b/root && ln -s /etc/passwd abs && ln -s a/b/back inside && ln -P up hard-up "
    "&& ln -s ../../etc ro/etc && chmod 555 ro"
)
_LOOK = (
    "readlink up a/b/back a/b/root abs inside hard-up ro/etc; cat up a/b/back; ls a/b/root/etc/hostname; "
    "stat -c '%U %a' up ro"
)


@pytest.fixture(params=["python", "static"])
async def either_runner(
    request: pytest.FixtureRequest, test_labels: dict[str, str], docker_client: Any
) -> AsyncIterator[Any]:
    """A backend on each runner: links and holes are restored by the runner, Python's or the Go one."""
    from sandboxkit.backends.docker import DockerBackend

    if request.param == "static":
        require_static_runner()
    backend = DockerBackend(labels=test_labels, runner=request.param)
    try:
        yield backend
    finally:
        await backend.aclose()
        assert leftovers(docker_client, test_labels) == (0, 0)


async def test_links_that_climb_out_of_the_workspace_survive_cold_and_warm_forks(either_runner: Any) -> None:
    backend = either_runner
    async with SandboxPool(backend, limits=FAST, warm=2, max_sandboxes=3) as pool, pool.session() as parent:
        made = await parent.exec(_LINKS)
        assert made.status is Status.OK, made
        expected = await parent.exec(_LOOK)
        assert expected.status is Status.OK, expected
        async with await parent.checkpoint() as checkpoint:
            warm = await pool.fork(checkpoint, 1)  # loaded into an idle warm container
            cold = await backend.open_from(checkpoint.snapshot, FAST)  # a new container
            forks: list[Any] = [*warm, cold]
            for fork in forks:
                seen = await fork.exec(_LOOK)
                assert (seen.status, seen.stdout) == (Status.OK, expected.stdout), seen
            assert pool.metrics()["errors"].get("restore_failed") is None
            for fork in forks:
                await fork.close()


def _host_bytes(snapshot: Any) -> int:
    """Disk the checkpoint's temporary file takes on the host (allocated blocks, not its length)."""
    assert isinstance(snapshot, ArchiveSnapshot)
    return os.fstat(snapshot._file.fileno()).st_blocks * 512


async def test_a_sparse_file_costs_no_disk_on_the_host_and_stays_sparse_in_forks(either_runner: Any) -> None:
    backend = either_runner
    parent = await backend.open(FAST)
    try:
        made = await parent.exec("truncate -s 32M sparse && printf end >> sparse && du -k sparse")
        assert made.status is Status.OK and int(made.stdout.split()[0]) < 32, made
        snap = await parent.snapshot()
        assert _host_bytes(snap) < 1 << 20  # was 32 MiB: the engine sends the holes as zeros
        fork = await backend.open_from(snap, FAST)
        seen = await fork.exec(
            "stat -c %s sparse; tail -c 3 sparse; echo; head -c 4096 sparse | tr -d '\\0' | wc -c; du -k sparse"
        )
        size, end, zeros, used = seen.stdout.split()[:4]
        assert (size, end, zeros) == (str((32 << 20) + 3), "end", "0"), seen
        assert int(used) < 1024, seen  # the fork's tmpfs holds the data, not 32 MB of zeros
        await fork.close()
        await snap.release()
    finally:
        await parent.close()


async def test_a_checkpoint_larger_than_the_workspace_cap_is_the_callers_error(
    test_labels: dict[str, str], docker_client: Any
) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels, workdir_size_mb=16)
    async with SandboxPool(backend, limits=BIG_FILES, warm=1, max_sandboxes=2) as pool:
        async with pool.session() as parent:
            # 100 MB apparent, nothing on the 16 MB tmpfs: a fork would need 100 MB to unpack it.
            made = await parent.exec("truncate -s 100M big && echo ok")
            assert made.stdout == "ok\n", made
            with pytest.raises(InvalidRequest, match="workdir_size_mb=16"):
                await parent.checkpoint()
            after = await parent.exec("rm big && echo small > f && ls")
            assert after.stdout == "f\n", after  # the session goes on, on the same sandbox
            async with await parent.checkpoint() as checkpoint:
                [fork] = await pool.fork(checkpoint, 1)
                assert (await fork.read_files(["f"])) == {"f": b"small\n"}
                await fork.close()
        assert pool.metrics()["sandboxes_created"] == 2
    await backend.aclose()
    assert backend.checkpoints == set()
    assert leftovers(docker_client, test_labels) == (0, 0)
