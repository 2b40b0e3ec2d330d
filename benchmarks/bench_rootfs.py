"""Root filesystems on the subprocess backend: opening a sandbox on its own overlay of an image.

Target (issue 15): opening a rootfs sandbox p50 <= 50 ms; 64 sandboxes opened in parallel and
closed leave 0 overlay mounts.

* The image is a static busybox directory image built here (apt ``busybox-static``), or the
  tarball named by ``$SANDBOXKIT_BENCH_ROOTFS`` (e.g. ``docker export`` of an image). It is
  unpacked once (into a private cache) before anything is timed.
* "open" is ``backend.open()``: a tmpfs, a cgroup, an overlay mount and the agent directories.
  The baseline is the same backend without a root filesystem, opened in alternating rounds.
* "first command" adds the first ``exec`` (bubblewrap with the image as ``/``), and "reset"
  is discarding the upper layer (unmount, wipe, mount) between tasks.
* Needs root (overlay mounts); without it the benchmark returns no rows.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._rootfs import has_overlay_mounts
from sandboxkit.benchmarking import Row, row_from_samples

BENCH = "rootfs"
TARGET_OPEN_MS = 50.0
PARALLEL = 64


def _busybox_image(directory: str) -> str | None:
    binary = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
    if binary is None:
        return None
    image = os.path.join(directory, "image")
    for folder in ("bin", "etc", "testbed"):
        os.makedirs(os.path.join(image, folder))
    shutil.copy(binary, os.path.join(image, "bin", "busybox"))
    for applet in ("sh", "cat", "echo", "ls"):
        os.symlink("busybox", os.path.join(image, "bin", applet))
    with open(os.path.join(image, "testbed", "x.txt"), "w") as f:
        f.write("x\n")
    return image


async def _open_close(backend: SubprocessBackend, rounds: int) -> tuple[list[float], list[float]]:
    opens, closes = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        sb = await backend.open()
        opens.append(time.perf_counter() - started)
        started = time.perf_counter()
        await sb.close()
        closes.append(time.perf_counter() - started)
    return opens, closes


async def _measure(image: str, workdir_root: str, cache: str, quick: bool) -> list[Row]:
    rootfs = SubprocessBackend(rootfs=image, rootfs_cache=cache, root=os.path.join(workdir_root, "r"))
    plain = SubprocessBackend(root=os.path.join(workdir_root, "p"))
    rounds, per_round = (3, 10) if quick else (5, 40)
    rootfs_open: list[float] = []
    plain_open: list[float] = []
    for _ in range(rounds):  # alternate, so drift on the shared machine hits both alike
        rootfs_open += (await _open_close(rootfs, per_round))[0]
        plain_open += (await _open_close(plain, per_round))[0]
    first: list[float] = []
    resets: list[float] = []
    for _ in range(per_round):
        started = time.perf_counter()
        sb = await rootfs.open()
        result = await sb.exec("cat /testbed/x.txt")
        first.append(time.perf_counter() - started)
        assert result.stdout == "x\n", result
        await sb.exec("echo y > /testbed/x.txt")
        started = time.perf_counter()
        assert await sb.reset()
        resets.append(time.perf_counter() - started)
        await sb.close()
    started = time.perf_counter()
    sandboxes = await asyncio.gather(*(rootfs.open() for _ in range(PARALLEL)))
    held = len(has_overlay_mounts([rootfs.root]))
    await asyncio.gather(*(sb.close() for sb in sandboxes))
    parallel_s = time.perf_counter() - started
    left = len(has_overlay_mounts([rootfs.root]))
    await rootfs.aclose()
    await plain.aclose()
    load = os.getloadavg()[0]
    base = row_from_samples(BENCH, "open, no rootfs (baseline)", plain_open, extra={"load1": load})
    opened = row_from_samples(
        BENCH,
        "open rootfs sandbox",
        rootfs_open,
        baseline=base.case,
        target=f"p50 <= {TARGET_OPEN_MS:g} ms",
        extra={"load1": load, "image": image},
    )
    opened.met = opened.median_ms <= TARGET_OPEN_MS
    opened.ratio = base.median_ms / opened.median_ms if opened.median_ms else None
    parallel = Row(
        BENCH,
        f"{PARALLEL} parallel opens + closes",
        PARALLEL,
        parallel_s * 1000 / PARALLEL,
        parallel_s * 1000,
        throughput=PARALLEL / parallel_s,
        target="0 overlay mounts left",
        met=held == PARALLEL and left == 0,
        extra={"overlays_while_open": held, "overlays_left": left, "load1": load},
    )
    return [
        base,
        opened,
        row_from_samples(BENCH, "open + first command (cold, busybox sh)", first, extra={"load1": load}),
        row_from_samples(BENCH, "reset (discard the upper layer)", resets, extra={"load1": load}),
        parallel,
    ]


def run(quick: bool = False) -> list[Row]:
    if os.geteuid() != 0:
        return []
    with tempfile.TemporaryDirectory(prefix="sandboxkit-bench-rootfs-") as directory:
        os.chmod(directory, 0o711)
        image = os.environ.get("SANDBOXKIT_BENCH_ROOTFS") or _busybox_image(directory)
        if image is None:
            return []
        return asyncio.run(_measure(image, directory, os.path.join(directory, "cache"), quick))
