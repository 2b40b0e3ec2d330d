"""The Harbor provider's file transfers (``_harbor_transfer``), on real subprocess sandboxes, without Harbor.

Downloads bring back what the sandbox chose, so they are attacked here: links to host files, links
to directories, fifos, and a host target that already holds a link.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandboxkit.integrations._harbor_transfer import clean_relative, download_tree, upload_tree, write_below
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session


@pytest.fixture
async def session() -> AsyncIterator[Session]:
    async with SandboxPool("subprocess", handle_signals=False) as pool, pool.session() as opened:
        yield opened


def test_names_that_could_leave_the_target_are_refused() -> None:
    assert clean_relative("./a/b.txt") == "a/b.txt"
    assert clean_relative("reward.txt") == "reward.txt"
    for bad in ("../x", "a/../../x", "/etc/passwd", "a//b", "./", "a/./b", "", "a/\0b"):
        assert clean_relative(bad) is None, bad


async def test_a_download_brings_back_regular_files_only(session: Session, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("the host's")
    made = await session.exec(
        "mkdir -p out/sub out/.hidden && echo 1 > out/reward.txt && echo b > out/sub/b.txt && "
        "echo h > out/.hidden/h && "
        f"ln -s {secret} out/link && ln -s / out/rootlink && ln -s /etc/passwd out/sub/passwd && "
        "mkfifo out/fifo && echo made"
    )
    assert made.stdout.strip() == "made", made.stderr
    target = tmp_path / "verifier"
    copied = await download_tree(session, "out", target)
    found = sorted(str(p.relative_to(target)) for p in target.rglob("*") if not p.is_dir())
    assert found == [".hidden/h", "reward.txt", "sub/b.txt"]
    assert copied == 3
    assert not any(p.is_symlink() for p in target.rglob("*"))
    assert (target / "reward.txt").read_text() == "1\n"


async def test_a_download_never_writes_through_a_link_on_the_host(session: Session, tmp_path: Path) -> None:
    """A target folder that is a link (planted by anyone) is refused, not followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "verifier"
    target.mkdir()
    (target / "sub").symlink_to(elsewhere)
    (target / "reward.txt").symlink_to(elsewhere / "reward.txt")
    with pytest.raises(OSError):
        write_below(target, "sub/b.txt", b"x")
    with pytest.raises(OSError):
        write_below(target, "reward.txt", b"x")
    assert list(elsewhere.iterdir()) == []


async def test_an_upload_keeps_empty_folders_and_executable_bits(session: Session, tmp_path: Path) -> None:
    source = tmp_path / "solution"
    (source / "empty").mkdir(parents=True)
    (source / "lib").mkdir()
    (source / "solve.sh").write_text("#!/bin/sh\necho solved\n")
    os.chmod(source / "solve.sh", 0o755)
    (source / "lib" / "data.txt").write_text("data\n")
    await upload_tree(session, source, "up")
    ran = await session.exec("./up/solve.sh && test -d up/empty && test ! -x up/lib/data.txt && cat up/lib/data.txt")
    assert ran.stdout == "solved\ndata\n", ran.stderr
