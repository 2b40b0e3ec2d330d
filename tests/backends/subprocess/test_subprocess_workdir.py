"""``workdir=`` without a root filesystem: bubblewrap binds the workspace at the agent's directory.

An agent dataset tells the model its files are in ``/testbed``; a program file the model writes
names ``/testbed/...`` literally, and only command strings can be rewritten. So the workspace
itself appears there (issue 28 item 5), and paths that would hide what the sandbox takes from the
host are refused before any sandbox opens.
"""

from __future__ import annotations

import os

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._isolation import probe
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import RunRequest, Status
from support.marks import missing
from support.subprocess_sandboxes import FAST

PROGRAM = "import os\nprint(os.getcwd(), open('/testbed/documents/nums.txt').read().split())\n"


def _bwrap_or_missing() -> None:
    if probe().bwrap is None:
        missing(f"bubblewrap does not work here: {probe().bwrap_error}")


@pytest.mark.parametrize("language", ["python", "bash"])
async def test_literal_workdir_paths_in_program_files_are_the_workspace(language: str) -> None:
    _bwrap_or_missing()
    backend = SubprocessBackend(workdir="/testbed")
    sb = await backend.open(FAST)
    try:
        await sb.write_files({"documents/nums.txt": "3\n4\n5\n"})
        if language == "python":
            await sb.write_files({"solve.py": PROGRAM})
            ran = await sb.exec("cd / && python3 /testbed/solve.py && pwd")
            assert ran.status is Status.OK and ran.stdout == "/ ['3', '4', '5']\n/\n", ran
            warm = await sb.run(RunRequest(code=PROGRAM, limits=FAST))
            assert warm.stdout == "/testbed ['3', '4', '5']\n", warm
        else:
            ran = await sb.exec("pwd; cat /testbed/documents/nums.txt | wc -l; echo 12 > /testbed/answer.txt")
            assert ran.stdout.startswith("/testbed\n3\n"), ran
            assert await sb.read_files(["answer.txt"]) == {"answer.txt": b"12\n"}
            await sb.write_files({"sub/x": ""})
            assert (await sb.exec("pwd", cwd="sub")).stdout == "/testbed/sub\n"
    finally:
        await sb.close()
        await backend.aclose()


async def test_default_workdir_is_still_work() -> None:
    _bwrap_or_missing()
    backend = SubprocessBackend()
    sb = await backend.open(FAST)
    try:
        assert (await sb.exec("pwd")).stdout == "/work\n"
    finally:
        await sb.close()
        await backend.aclose()


@pytest.mark.parametrize(
    "workdir",
    [
        "/",
        "/usr",
        "/usr/local/w",
        "/etc/w",
        "/bin",
        "/lib64",
        "/tmp/w",
        "/proc",
        "/dev/w",
        "/sys",
        "/var/w",
        "relative",
    ],
)
def test_workdirs_that_hide_the_hosts_directories_are_refused(workdir: str) -> None:
    _bwrap_or_missing()
    with pytest.raises(InvalidRequest, match="workdir"):
        SubprocessBackend(workdir=workdir)


def test_a_new_mount_point_inside_a_read_only_host_directory_is_refused() -> None:
    _bwrap_or_missing()
    tops = [n for n in sorted(os.listdir("/")) if os.path.isdir("/" + n) and n in ("home", "mnt", "opt", "srv")]
    if not tops:
        pytest.skip("no /home, /mnt, /opt or /srv on this host to nest a workdir in")
    with pytest.raises(InvalidRequest, match="read-only"):
        SubprocessBackend(workdir=f"/{tops[0]}/sandboxkit-no-such-dir")
