"""The host's C library is loaded in one place (``_libc``), and its mount calls report the errno.

Three modules each loaded libc themselves (two of them by running ``ldconfig`` through
``find_library`` on every mount); one module now does it once, so a fix to how libc is found or
how a failed mount is reported lands everywhere.
"""

from __future__ import annotations

import errno
import os
import pathlib

import pytest

import sandboxkit.backends.subprocess as subprocess_backend
from sandboxkit.backends.subprocess import _libc

PACKAGE = pathlib.Path(subprocess_backend.__file__).parent


def test_only_the_libc_module_loads_the_c_library() -> None:
    loaders = sorted(
        path.name for path in PACKAGE.glob("*.py") if "CDLL(" in path.read_text() and path.name != "_libc.py"
    )
    assert loaders == []


def test_a_refused_mount_is_an_oserror_with_the_kernels_errno(tmp_path: pathlib.Path) -> None:
    absent = str(tmp_path / "absent")
    with pytest.raises(OSError) as caught:
        _libc.mount(b"tmpfs", absent, "size=1m")
    assert caught.value.errno in (errno.ENOENT, errno.EPERM)
    assert absent in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_tmpfs_mounts_and_unmounts(tmp_path: pathlib.Path) -> None:
    target = str(tmp_path)
    _libc.mount(b"tmpfs", target, "size=1m,mode=0700")
    try:
        assert os.path.ismount(target)
    finally:
        _libc.unmount(target)
    assert not os.path.ismount(target)
