"""Runs on a real engine: languages from the shared table, the Python fast path's fidelity to
``python3 -u main.py``, exec, files, reset, crash handling and the container's hardening."""

from __future__ import annotations

import hashlib
import sys
from typing import Any

import anyio
import pytest

from sandboxkit.errors import BackendUnavailable, SandboxCrashed, ToolchainMissing
from sandboxkit.languages import LANGUAGES
from sandboxkit.models import Limits, RunRequest, Status
from sandboxkit.pool import SandboxPool
from support.docker_engine import FAST

HELLO = {
    "python": "print('hello', input())",
    "bash": "read x; echo hello $x",
    "c": '#include <stdio.h>\nint main(void){char s[64]; scanf("%63s", s); printf("hello %s\\n", s); return 0;}',
    "cpp": "#include <iostream>\nint main(){std::string s; std::cin >> s; std::cout << \"hello \" << s << '\\n';}",
    "javascript": "const s = require('fs').readFileSync(0, 'utf8').trim(); console.log('hello ' + s);",
    "java": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
    ' System.out.println("hello " + new Scanner(System.in).next()); } }',
}
BROKEN = {"c": "int main( {", "cpp": "int main( {", "java": "public class Main { void x( }"}


async def _image_has(sandbox: Any, language: str) -> bool:
    binaries = " ".join(LANGUAGES[language].binaries)
    return (await sandbox.exec(f"command -v {binaries}")).exit_code == 0


@pytest.mark.parametrize("language", sorted(HELLO))
async def test_hello_with_stdin(sandbox: Any, language: str) -> None:
    if not await _image_has(sandbox, language):
        pytest.skip(f"the image has no {language} toolchain (scripts/docker-setup.sh adds it on request)")
    result = await sandbox.run(RunRequest(code=HELLO[language], language=language, stdin="world\n", limits=FAST))
    assert result.status is Status.OK, result
    assert result.stdout == "hello world\n"


@pytest.mark.parametrize("language", sorted(BROKEN))
async def test_compile_error_carries_the_compiler_message(sandbox: Any, language: str) -> None:
    if not await _image_has(sandbox, language):
        pytest.skip(f"the image has no {language} toolchain")
    result = await sandbox.run(RunRequest(code=BROKEN[language], language=language, limits=FAST))
    assert result.status is Status.COMPILE_ERROR
    assert result.compile is not None and "error" in result.compile.stderr
    assert result.stdout == "" and result.exit_code is None


async def test_runtime_error_and_timeout_in_c(sandbox: Any) -> None:
    crash = await sandbox.run(RunRequest(code="int main(void){ int *p = 0; return *p; }", language="c", limits=FAST))
    assert crash.status is Status.FAILED and crash.signal == 11
    spin = "int main(void){ for(;;); }"
    slow = await sandbox.run(RunRequest(code=spin, language="c", limits=FAST.merged(timeout_s=1)))
    assert slow.status is Status.TIMEOUT


async def test_missing_toolchain_is_a_clear_error(sandbox: Any) -> None:
    absent = [lang for lang in LANGUAGES if not await _image_has(sandbox, lang)]
    if not absent:
        pytest.skip("this image has every toolchain")
    with pytest.raises(ToolchainMissing, match=LANGUAGES[absent[0]].package):
        await sandbox.run(RunRequest(code="x", language=absent[0], limits=FAST))
    assert await sandbox.alive()


PROGRAMS = [
    "import sys\nprint(__name__, sys.argv, __file__)\nprint(sys.path[0])",
    "import sys\nsys.exit('bad input')",
    "import sys\nsys.exit(7)",
    "def f():\n    raise KeyError('k')\nf()",
    "print('unterminated",
    "import atexit, threading, time\natexit.register(print, 'bye')\n"
    "threading.Thread(target=lambda: (time.sleep(0.1), print('thread'))).start()\nprint('main')",
    "import sys\nprint(sys.stdin.read().upper(), end='')\nprint('err', file=sys.stderr)",
    "print(input())\nprint(input())",
    "import os\nprint(os.getcwd(), os.environ['HOME'])",
    "import sys\nprint(sys.stdout.encoding, sys.stdout.errors, sys.stdin.errors, sys.flags.isolated)",
]


async def test_python_fast_path_behaves_like_python3(test_labels: dict[str, str]) -> None:
    from sandboxkit.backends.docker import DockerBackend

    fast, cold = DockerBackend(labels=test_labels), DockerBackend(labels=test_labels, python_fast=False)
    try:
        sandboxes = [await fast.open(FAST), await cold.open(FAST)]
        for code in PROGRAMS:
            request = RunRequest(code=code, stdin="line one\n", limits=FAST, argv=["a b"])
            warm, reference = [await sb.run(request) for sb in sandboxes]
            assert (warm.status, warm.exit_code, warm.stdout, warm.stderr) == (
                reference.status,
                reference.exit_code,
                reference.stdout,
                reference.stderr,
            ), code
        for sb in sandboxes:
            await sb.close()
    finally:
        await fast.aclose()
        await cold.aclose()


async def test_exec_cwd_env_and_missing_command(sandbox: Any) -> None:
    await sandbox.write_files({"sub/dir/f.txt": "x"})
    here = await sandbox.exec("pwd; echo $GREETING; ls", cwd="sub/dir", env={"GREETING": "hi"})
    assert here.stdout == "/work/sub/dir\nhi\nf.txt\n"
    missing = await sandbox.exec(["no-such-program", "x"])
    assert missing.status is Status.FAILED and missing.exit_code == 127


async def test_written_folders_belong_to_the_program(sandbox: Any) -> None:
    await sandbox.write_files({"data/in.txt": "1"})
    result = await sandbox.exec("echo 2 > data/out.txt && stat -c '%U %a' data data/in.txt && cat data/out.txt")
    assert result.stdout == "sandbox 755\nsandbox 644\n2\n", result


async def test_reset_wipes_workspace_tmp_and_processes(sandbox: Any, docker_client: Any) -> None:
    await sandbox.exec("echo x > /tmp/t; echo y > w; chmod 000 .; true")
    assert await sandbox.reset()
    listing = await sandbox.exec("ls -A /tmp .")
    assert listing.stdout.split() == ["/tmp:", ".:"] or listing.stdout.split() == [".:", "/tmp:"], listing


async def test_a_container_killed_from_outside_is_crashed_and_replaced(
    backend: Any, docker_client: Any, test_labels: dict[str, str]
) -> None:
    async with SandboxPool(backend, max_concurrency=1, limits=FAST) as pool:
        assert (await pool.run("print(1)")).stdout == "1\n"
        for container in docker_client.api.containers(
            filters={"label": f"sandboxkit.test={test_labels['sandboxkit.test']}"}
        ):
            docker_client.api.kill(container["Id"])
        assert (await pool.run("print(2)")).stdout == "2\n"  # the dead one failed its health check
        assert pool.metrics()["errors"].get("dead_on_lease") == 1


async def test_death_mid_run_raises_crashed(sandbox: Any, docker_client: Any) -> None:
    async def kill_soon() -> None:
        await anyio.sleep(0.5)
        await anyio.to_thread.run_sync(docker_client.api.kill, sandbox.container_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_soon)
        with pytest.raises(SandboxCrashed):
            await sandbox.run(RunRequest(code="import time\ntime.sleep(30)", limits=FAST.merged(timeout_s=30)))
    assert not await sandbox.alive()


async def test_a_stuck_runner_hits_the_host_deadline(test_labels: dict[str, str], docker_client: Any) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels, grace_s=1.0)
    sandbox = await backend.open(FAST)
    try:
        docker_client.api.pause(sandbox.container_id)  # the runner can no longer enforce anything
        with pytest.raises(SandboxCrashed, match="did not answer"):
            await sandbox.run(RunRequest(code="print(1)", limits=FAST.merged(timeout_s=1)))
        assert not await sandbox.alive()
    finally:
        await sandbox.close()
        await backend.aclose()


async def test_container_is_hardened(sandbox: Any, docker_client: Any, test_labels: dict[str, str]) -> None:
    info = docker_client.api.inspect_container(sandbox.container_id)
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none" and host["Privileged"] is False
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"] and host["PidsLimit"] == FAST.pids + 1
    assert host["CpuQuota"] > 0 and host["AutoRemove"] is True and host["LogConfig"]["Type"] == "none"
    # The runner is root with only these capabilities; every program runs as 1000 with none.
    assert info["Config"]["User"] == "0:0" and sorted(host["CapAdd"]) == ["KILL", "SETGID", "SETUID"]
    labels = info["Config"]["Labels"]
    assert labels["sandboxkit"] == "1" and labels["sandboxkit.test"] == test_labels["sandboxkit.test"]
    assert labels["sandboxkit.instance"] and labels["sandboxkit.backend"] == "docker"
    status = await sandbox.exec("grep -E '^(Uid|CapEff|CapPrm|NoNewPrivs)' /proc/self/status")
    assert status.stdout.split() == [
        *("Uid:", "1000", "1000", "1000", "1000"),
        *("CapPrm:", "0000000000000000", "CapEff:", "0000000000000000", "NoNewPrivs:", "1"),
    ]


async def test_emergency_cleanup_removes_what_it_created(test_labels: dict[str, str], docker_client: Any) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels)
    await backend.open(FAST)
    await backend.open(FAST)
    backend.emergency_cleanup()  # sync, as at interpreter exit
    filters = {"label": f"sandboxkit.test={test_labels['sandboxkit.test']}"}
    assert docker_client.api.containers(all=True, filters=filters) == []
    await backend.aclose()


def test_availability_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandboxkit.backends.docker import DockerBackend

    assert DockerBackend.availability().usable
    no_image = DockerBackend.availability(image="sandboxkit-no-such-image:latest")
    assert not no_image.usable and "docker-setup.sh" in no_image.reason
    no_engine = DockerBackend.availability(base_url="unix:///nonexistent/docker.sock")
    assert not no_engine.usable and "dockerd" in no_engine.reason
    monkeypatch.setitem(sys.modules, "docker", None)
    no_sdk = DockerBackend.availability()
    assert not no_sdk.usable and 'pip install "sandboxkit[docker]"' in no_sdk.reason


async def test_open_with_a_missing_image_is_unavailable(test_labels: dict[str, str]) -> None:
    from sandboxkit.backends.docker import DockerBackend

    backend = DockerBackend(labels=test_labels, image="sandboxkit-no-such-image:latest")
    with pytest.raises(BackendUnavailable, match=r"docker-setup\.sh"):
        await backend.open(Limits())
    await backend.aclose()


async def test_an_empty_image_needs_the_static_runner(test_labels: dict[str, str], docker_client: Any) -> None:
    import io
    import tarfile
    import uuid

    from sandboxkit.backends.docker import DockerBackend

    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w") as tar:
        info = tarfile.TarInfo("work")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    name = f"sandboxkit-test-empty:{uuid.uuid4().hex[:8]}"
    docker_client.api.import_image_from_data(empty.getvalue(), repository=name.split(":")[0], tag=name.split(":")[1])
    backend = DockerBackend(labels=test_labels, image=name, runner="python")
    anything = DockerBackend(labels=test_labels, image=name)  # runner="auto": the static runner stands in
    try:
        with pytest.raises(BackendUnavailable, match="python3"):
            await backend.open(FAST)
        sandbox = await anything.open(FAST)
        try:
            assert sandbox.runner == "static"
            missing = await sandbox.exec(["sh", "-c", "true"])  # nothing at all in this image
            assert missing.exit_code == 127 and "command not found" in missing.stderr, missing
            with pytest.raises(ToolchainMissing, match="python3"):
                await sandbox.run(RunRequest(code="print(1)", limits=FAST))
            await sandbox.write_files({"a/b.txt": "kept"})
            assert await sandbox.read_files(["a/b.txt"]) == {"a/b.txt": b"kept"}
        finally:
            await sandbox.close()
    finally:
        await backend.aclose()
        await anything.aclose()
        docker_client.api.remove_image(name, force=True)


async def test_fetch_files_small_inline_large_through_the_engine(sandbox: Any) -> None:
    # Up to 1 MiB per file and 4 MiB per call come back over the channel; the rest is checked by
    # the runner and copied with get_archive. Both paths must return the same bytes.
    code = (
        "import os\nopen('big.bin', 'wb').write(os.urandom(3 << 20))\n"
        "for i in range(6):\n    open(f'part{i}.bin', 'wb').write(bytes([i]) * (900 << 10))\n"
        "open('empty', 'wb').close()\nprint('written')"
    )
    names = ["big.bin", *(f"part{i}.bin" for i in range(6)), "empty", "absent"]
    result = await sandbox.run(RunRequest(code=code, fetch_files=names, limits=FAST))
    assert result.stdout == "written\n", result
    assert sorted(result.files) == sorted(n for n in names if n != "absent")
    assert len(result.files["big.bin"]) == 3 << 20 and result.files["empty"] == b""
    for i in range(6):
        assert result.files[f"part{i}.bin"] == bytes([i]) * (900 << 10)
    check = await sandbox.exec("sha256sum big.bin")
    assert check.stdout.split()[0] == hashlib.sha256(result.files["big.bin"]).hexdigest()
