"""Root filesystems for the rootfs tests (``support.rootfs``): a tiny busybox image, and the base image exported.

Both are built once per machine under :data:`ROOT` (the unpacked cache too), so a test run
after the first pays milliseconds for them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

#: Where test images and their unpacked cache live across runs (label: the directory name).
ROOT = os.path.join(tempfile.gettempdir(), "sandboxkit-test-rootfs")
CACHE = os.path.join(ROOT, "cache")
BUSYBOX_APPLETS = ("sh", "cat", "ls", "id", "mkdir", "echo", "pwd", "ln", "touch", "rm", "sleep", "test", "[")
#: What the busybox image's /etc/hostname says (never the host's).
IMAGE_HOSTNAME = "busybox-image"


def busybox() -> str | None:
    """Path of a statically linked busybox (apt ``busybox-static``), or None."""
    for path in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(path):
            out = subprocess.run(["file", "-L", path], capture_output=True, text=True, check=False).stdout
            if "statically linked" in out or "static-pie" in out or not shutil.which("file"):
                return path
    return None


@functools.cache
def busybox_rootfs() -> str | None:
    """A directory image: a static busybox, a few applets, ``/testbed/x.txt`` and ``/etc/hostname``."""
    binary = busybox()
    if binary is None:
        return None
    dest = os.path.join(ROOT, "busybox")
    if not os.path.exists(os.path.join(dest, ".complete")):
        shutil.rmtree(dest, ignore_errors=True)
        for folder in ("bin", "etc", "testbed", "usr/bin"):
            os.makedirs(os.path.join(dest, folder))
        shutil.copy(binary, os.path.join(dest, "bin", "busybox"))
        for applet in BUSYBOX_APPLETS:
            os.symlink("busybox", os.path.join(dest, "bin", applet))
        with open(os.path.join(dest, "etc", "hostname"), "w") as f:
            f.write(IMAGE_HOSTNAME + "\n")
        with open(os.path.join(dest, "etc", "passwd"), "w") as f:
            f.write("root:x:0:0:image root:/root:/bin/sh\n")
        with open(os.path.join(dest, "testbed", "x.txt"), "w") as f:
            f.write("baked into the image\n")
        open(os.path.join(dest, ".complete"), "w").close()
    return dest


@functools.cache
def base_image_tarball() -> str | None:
    """``docker export`` of the project's base image (python3, bash, gcc...), or None without Docker."""
    try:
        import docker
        import docker.errors
    except ImportError:
        return None
    try:
        client = docker.from_env(timeout=30)
        image = client.images.get("sandboxkit-base:latest")
    except Exception:
        return None
    try:
        path = os.path.join(ROOT, f"base-{image.id.split(':')[-1][:16]}.tar")
        if not os.path.exists(path):
            os.makedirs(ROOT, exist_ok=True)
            container = client.containers.create(
                image.id, command=["true"], labels={"sandboxkit.test": "rootfs-export"}
            )
            try:
                tmp = f"{path}.{os.getpid()}"
                with open(tmp, "wb") as f:
                    for chunk in container.export():
                        f.write(chunk)
                os.replace(tmp, path)
            finally:
                container.remove(force=True)
        return path
    finally:
        client.close()
