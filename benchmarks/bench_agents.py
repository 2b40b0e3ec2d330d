"""Agent environments: LLM-in-Sandbox episodes and their math scoring.

* "math scored": one math answer compared with math-verify. sandboxkit keeps one warm worker
  process (math-verify's timeouts need a main thread; rLLM calls envs from threads); the
  baseline is what LLM-in-Sandbox-RL's env does per episode: a fresh one-worker
  ``ProcessPoolExecutor`` for the comparison. Both run the same comparison function.
* "episode": one LLM-in-Sandbox-RL row end to end (reset with input files, two tool calls,
  submit, reward from ``answer.txt``) on the subprocess backend, on subprocess with a busybox
  root filesystem (root and a static busybox needed), and on Docker (when an engine answers).
* "64 episodes in parallel": rLLM's engine shape (a 64-thread pool), subprocess backend.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import time
from typing import Any

from sandboxkit.benchmarking import Row, row_from_samples
from sandboxkit.integrations._math_worker import _compare, math_worker, shutdown_math_worker
from sandboxkit.integrations._runtime import close_shared_handles
from sandboxkit.integrations.rllm import SandboxEnv

BENCH = "agents"
ROW = {"domain": "math", "ground_truth": "12", "problem_statement": "sum", "input_files": {"nums.txt": "3\n4\n5\n"}}


def _per_episode_process(answer: str, truth: str) -> float:
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as executor:
        return float(executor.submit(_compare, answer, truth).result(timeout=60))


def _math_rows(n: int, load: float) -> list[Row]:
    worker = math_worker()
    assert worker.score("\\frac{1}{2}", "0.5") == 1.0  # warm: started before timing
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(n):  # alternate, so drift on a shared machine hits both alike
        started = time.perf_counter()
        assert worker.score(f"{i}/2", str(i / 2)) == 1.0
        ours.append(time.perf_counter() - started)
        if i % 4 == 0:
            started = time.perf_counter()
            assert _per_episode_process(f"{i}/2", str(i / 2)) == 1.0
            theirs.append(time.perf_counter() - started)
    base = row_from_samples(
        BENCH, "math scored: a process per episode (LLM-in-Sandbox-RL)", theirs, extra={"load1": load}
    )
    row = row_from_samples(
        BENCH, "math scored: warm worker (sandboxkit)", ours, baseline=base.case, extra={"load1": load}
    )
    row.ratio = base.median_ms / row.median_ms if row.median_ms else None
    return [base, row]


def _episode(args: dict[str, Any], command: str = "echo 12 > /testbed/answer.txt") -> float:
    env = SandboxEnv.from_dict({**ROW, **args})
    try:
        env.reset()
        env.step({"name": "execute_bash", "arguments": {"command": "cat /testbed/documents/nums.txt"}})
        env.step({"name": "execute_bash", "arguments": {"command": command}})
        return env.step({"name": "submit", "arguments": {}})[1]
    finally:
        env.close()


def _episode_row(case: str, args: dict[str, Any], n: int, load: float) -> Row:
    assert _episode(args) == 1.0  # warm the shared pool (and image) first
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        assert _episode(args) == 1.0
        samples.append(time.perf_counter() - started)
    return row_from_samples(BENCH, case, samples, extra={"load1": load})


def _busybox_image(directory: str) -> str | None:
    binary = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
    if binary is None:
        return None
    image = os.path.join(directory, "image")
    os.makedirs(os.path.join(image, "bin"))
    shutil.copy(binary, os.path.join(image, "bin", "busybox"))
    for applet in ("sh", "cat", "echo", "ls", "test", "pwd"):
        os.symlink("busybox", os.path.join(image, "bin", applet))
    return image


def _docker_up() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def run(quick: bool = False) -> list[Row]:
    n = 8 if quick else 30
    load = os.getloadavg()[0]
    rows = _math_rows(n * 2, load)
    try:
        rows.append(_episode_row("episode: subprocess", {"backend": "subprocess"}, n, load))
        with tempfile.TemporaryDirectory(prefix="sandboxkit-bench-agents-") as directory:
            os.chmod(directory, 0o711)
            image = _busybox_image(directory) if os.geteuid() == 0 else None
            if image is not None:
                options = {"rootfs": image, "rootfs_cache": os.path.join(directory, "c"), "root": directory + "/r"}
                args = {"backend": "subprocess", "backend_options": options}
                rows.append(_episode_row("episode: subprocess, busybox root filesystem", args, n, load))
            close_shared_handles()
        if _docker_up():
            rows.append(_episode_row("episode: docker", {"backend": "docker"}, max(3, n // 3), load))
        parallel = 64
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as executor:
            rewards = list(executor.map(lambda _: _episode({"backend": "subprocess"}), range(parallel)))
        wall = time.perf_counter() - started
        rows.append(
            Row(
                BENCH,
                f"{parallel} episodes in parallel (64 threads), subprocess",
                parallel,
                wall * 1000 / parallel,
                wall * 1000,
                throughput=parallel / wall,
                met=rewards == [1.0] * parallel,
                target="every episode scores 1.0",
                extra={"load1": os.getloadavg()[0]},
            )
        )
    finally:
        close_shared_handles()
        shutdown_math_worker()
    return rows
