"""No leaks, whatever happens to the process that drives the pool.

A separate Python process runs a batch through ``SandboxPool("docker")``. Killed with SIGKILL,
it cannot clean up: ``sandboxkit cleanup --backend docker`` must then remove everything it
left. A normal exit, SIGINT and SIGTERM must leave nothing at all. Containers and volumes are
counted by the label this test gives the child (``SANDBOXKIT_DOCKER_LABELS``), so other users of
the engine are neither counted nor cleaned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sandboxkit.backends.docker import DockerBackend
from support.docker_engine import TEST_LABEL, containers_of, leftovers, run_cleanup_cli

CHILD = Path(__file__).with_name("leak_child.py")
RUNNING = 3  # the child's max_concurrency


def start_child(mode: str, labels: dict[str, str]) -> subprocess.Popen[str]:
    env = {**os.environ, "SANDBOXKIT_DOCKER_LABELS": ",".join(f"{k}={v}" for k, v in labels.items())}
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for_running(client: Any, labels: dict[str, str], child: subprocess.Popen[str], count: int) -> None:
    deadline = time.monotonic() + 90
    while len(containers_of(client, labels)) < count:
        assert child.poll() is None, f"the child exited early: {child.communicate()}"
        assert time.monotonic() < deadline, "the child's containers never started"
        time.sleep(0.2)
    time.sleep(0.5)  # let the runs get going inside them


def test_sigkill_then_cleanup_removes_everything(docker_client: Any, test_labels: dict[str, str]) -> None:
    child = start_child("slow", test_labels)
    try:
        wait_for_running(docker_client, test_labels, child, RUNNING)
        child.kill()
        child.wait(timeout=30)
        assert sum(leftovers(docker_client, test_labels)) > 0, "SIGKILL left nothing to clean: the test is void"
        assert f"removed {RUNNING} sandbox(es)" in run_cleanup_cli(test_labels)
        assert leftovers(docker_client, test_labels) == (0, 0)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def test_normal_exit_leaves_nothing(docker_client: Any, test_labels: dict[str, str]) -> None:
    child = start_child("quick", test_labels)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.startswith("DONE") and out.count("45") == 6
    assert leftovers(docker_client, test_labels) == (0, 0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_batch_leaves_nothing(docker_client: Any, test_labels: dict[str, str], sig: int) -> None:
    child = start_child("slow", test_labels)
    try:
        wait_for_running(docker_client, test_labels, child, RUNNING)
        child.send_signal(sig)
        child.wait(timeout=60)
        assert child.returncode != 0  # it was interrupted, not finished
        assert leftovers(docker_client, test_labels) == (0, 0)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def test_cleanup_touches_only_its_own_labels(docker_client: Any, test_labels: dict[str, str]) -> None:
    other = {TEST_LABEL: test_labels[TEST_LABEL] + "-other"}
    child = start_child("slow", other)
    try:
        wait_for_running(docker_client, other, child, RUNNING)
        run_cleanup_cli(test_labels)  # a different job's scope
        assert len(containers_of(docker_client, other)) == RUNNING
    finally:
        child.kill()
        child.communicate()
        asyncio.run(DockerBackend(labels=other).cleanup())
        assert leftovers(docker_client, other) == (0, 0)
