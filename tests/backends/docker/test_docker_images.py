"""The sandbox contract on images the Python runner cannot use, with shell programs.

``sandboxkit-busybox`` holds only a static busybox (no libc, no bash, no Python);
``sandboxkit-nopython`` is Debian minbase without Python (both from
scripts/docker-test-images.sh). The conformance suite's programs are Python, so most of it
skips there; these tests check the same contract (outputs, exit codes, stdin, timeouts,
output caps, limits, files, symlinks, reset, no leftovers) with ``sh``. The default
``runner="auto"`` must pick the static runner by itself.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit.errors import BackendUnavailable, ToolchainMissing
from sandboxkit.models import Limits, RunRequest, Status
from support.docker_engine import FAST, leftovers

IMAGES = ("sandboxkit-busybox:latest", "sandboxkit-nopython:latest")


@functools.cache
def _present(image: str) -> bool:
    import docker

    client = docker.from_env()
    try:
        client.images.get(image)
        return True
    except docker.errors.DockerException:
        return False
    finally:
        client.close()


@pytest.fixture(params=IMAGES, ids=["busybox", "nopython"])
async def image_backend(request: pytest.FixtureRequest, test_labels: dict[str, str], docker_client: Any) -> Any:
    from sandboxkit.backends.docker import DockerBackend

    image = str(request.param)
    if not _present(image) and os.environ.get("CI") != "true":
        pytest.skip(f"image {image} is missing: build it with scripts/docker-test-images.sh")
    backend = DockerBackend(labels=test_labels, image=image)
    try:
        yield backend
    finally:
        await backend.aclose()
        assert leftovers(docker_client, test_labels) == (0, 0), "the test left containers or volumes behind"


@pytest.fixture
async def box(image_backend: Any) -> AsyncIterator[Any]:
    sandbox = await image_backend.open(FAST)
    try:
        yield sandbox
    finally:
        await sandbox.close()


async def test_auto_picks_the_static_runner_and_shell_works(box: Any) -> None:
    assert box.runner == "static"
    shell = await box.exec("echo $((6*7)); echo err >&2; exit 4")
    assert (shell.status, shell.exit_code, shell.stdout, shell.stderr) == (Status.FAILED, 4, "42\n", "err\n"), shell
    argv = await box.exec(["sh", "-c", 'printf "%s|" "$@"', "zero", "a b", "", "c"])
    assert argv.stdout == "a b||c|", argv
    env = await box.exec(["sh", "-c", 'echo "$GREETING:$HOME:$(id -u)"'], env={"GREETING": "hé"})
    assert env.stdout == "hé:/work:1000\n", env


async def test_stdin_timeout_and_missing_commands(box: Any) -> None:
    echoed = await box.exec("cat", stdin="piped\nlines\n")
    assert echoed.stdout == "piped\nlines\n"
    slow = await box.exec("sleep 30", timeout=1)
    assert slow.status is Status.TIMEOUT and slow.duration_s < 10, slow
    missing = await box.exec(["no-such-tool"])
    assert missing.exit_code == 127 and "command not found" in missing.stderr
    with pytest.raises(ToolchainMissing, match="python3"):
        await box.run(RunRequest(code="print(1)", limits=FAST))
    assert (await box.exec("echo still")).stdout == "still\n"  # the sandbox survives all of it


async def test_bash_programs_run_where_bash_exists(box: Any, image_backend: Any) -> None:
    request = RunRequest(code='read x; echo "got $x"; exit 3', language="bash", stdin="in\n", limits=FAST)
    if "busybox" in image_backend.image:
        with pytest.raises(ToolchainMissing, match="bash"):
            await box.run(request)
        return
    ran = await box.run(request)
    assert (ran.status, ran.exit_code, ran.stdout) == (Status.FAILED, 3, "got in\n"), ran


async def test_long_output_keeps_head_and_tail(box: Any) -> None:
    limits = FAST.merged(output_bytes=10_000)
    result = await box.exec(["sh", "-c", "echo START; yes filler | head -c 3000000; echo; echo END"])
    assert result.stdout.startswith("START\n") and result.stdout.endswith("END\n")
    capped = await _capped(box, limits)
    assert capped.stdout_truncated and capped.stdout.startswith("START") and capped.stdout.endswith("END\n")
    assert len(capped.stdout) < 12_000


async def _capped(box: Any, limits: Limits) -> Any:
    """exec takes the sandbox's limits; open a second sandbox with the small output cap."""
    sandbox = await box._backend.open(limits)
    try:
        return await sandbox.exec(["sh", "-c", "echo START; yes filler | head -c 3000000; echo; echo END"])
    finally:
        await sandbox.close()


async def test_pids_and_file_size_limits(image_backend: Any) -> None:
    limits = FAST.merged(pids=8, file_size_mb=1)
    sandbox = await image_backend.open(limits)
    try:
        # The subshell dies at the first failed fork; its sleeps stay. Counting uses no fork (a glob).
        bomb = "(for i in $(seq 1 64); do sleep 3 & done) 2>/dev/null; set -- /proc/[0-9]*; echo $#"
        held = await sandbox.exec(["sh", "-c", bomb])
        assert held.stdout.strip().isdigit(), held
        assert 2 < int(held.stdout) - 2 < 16, f"{held.stdout.strip()} processes under pids=8"  # less runner, sh
        big = await sandbox.exec(["sh", "-c", "dd if=/dev/zero of=big bs=65536 count=64 2>/dev/null; wc -c < big"])
        assert int(big.stdout.split()[-1]) <= 1 << 20, big
    finally:
        await sandbox.close()


async def test_files_symlinks_and_reset(box: Any) -> None:
    await box.write_files({"dir/a.txt": "alpha", "b.bin": b"\x00\xff"})
    made = await box.exec(["sh", "-c", "cat dir/a.txt > c.txt; ln -s /etc/passwd leak; ln -s /etc etc; sleep 1000 &"])
    assert made.exit_code == 0, made
    files = await box.read_files(["dir/a.txt", "b.bin", "c.txt", "leak", "etc/passwd", "absent"])
    assert files == {"dir/a.txt": b"alpha", "b.bin": b"\x00\xff", "c.txt": b"alpha"}
    alive = await box.exec(["sh", "-c", "set -- /proc/[0-9]*; echo $#"])  # a glob: no process of its own
    assert alive.stdout.strip() == "2", alive  # the runner and this shell: the sleep died with its run
    assert await box.reset() is True
    after = await box.exec(["sh", "-c", "ls -A; ls -A /tmp"])
    assert after.stdout == "", after


async def test_a_python_without_its_standard_library_falls_back_to_the_static_runner(
    test_labels: dict[str, str], docker_client: Any
) -> None:
    # What python3-minimal gives (issue 15): `python3` exists, `import json` fails, so the Python
    # runner dies at start. The image is the base image with the json package removed.
    import uuid

    from sandboxkit.backends.docker import DEFAULT_IMAGE, DockerBackend

    name = f"sandboxkit-test-nojson:{uuid.uuid4().hex[:8]}"
    container = docker_client.containers.create(
        DEFAULT_IMAGE, ["sh", "-c", "rm -rf /usr/lib/python3*/json"], labels=test_labels, user="0:0"
    )
    try:
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        container.commit(repository=name.split(":")[0], tag=name.split(":")[1])
    finally:
        container.remove(force=True)
    python_only = DockerBackend(labels=test_labels, image=name, runner="python")
    backend = DockerBackend(labels=test_labels, image=name)
    try:
        with pytest.raises(BackendUnavailable, match="did not start"):
            await python_only.open(FAST)
        sandbox = await backend.open(FAST)
        try:
            assert sandbox.runner == "static"
            ran = await sandbox.run(RunRequest(code="import sys\nprint(sys.version_info[0])", limits=FAST))
            assert ran.status is Status.OK and ran.stdout == "3\n", ran  # python3 itself still runs programs
            broken = await sandbox.run(RunRequest(code="import json", limits=FAST))
            assert broken.status is Status.FAILED and "json" in broken.stderr, broken
        finally:
            await sandbox.close()
        again = await backend.open(FAST)  # later sandboxes go straight to the static runner
        assert again.runner == "static"
        await again.close()
    finally:
        await python_only.aclose()
        await backend.aclose()
        docker_client.api.remove_image(name, force=True)
    assert leftovers(docker_client, test_labels) == (0, 0)
