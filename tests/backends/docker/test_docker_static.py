"""The static runner's own protections, checked from outside the container.

The attack and hostile suites run against it too (test_docker_static_suites.py); what differs
is memory: no program ever inherits the static runner's memory (every program starts by exec),
so instead of dumping a child, the test reads the runner's own memory from the host (the tests
run as root next to the engine) and looks there for an earlier run's secrets.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandboxkit.models import RunRequest, Status
from support.docker_engine import FAST, require_static_runner


@pytest.fixture
async def static(test_labels: dict[str, str], docker_client: Any) -> AsyncIterator[Any]:
    from sandboxkit.backends.docker import DockerBackend

    require_static_runner()
    backend = DockerBackend(labels=test_labels, runner="static")
    sandbox = await backend.open(FAST)
    try:
        assert sandbox.runner == "static"
        yield sandbox
    finally:
        await sandbox.close()
        await backend.aclose()


def _runner_memory(docker_client: Any, container_id: str) -> bytes:
    """Every readable mapping of the container's PID 1, read through the host's /proc."""
    pid = docker_client.api.inspect_container(container_id)["State"]["Pid"]
    chunks = []
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if perms.startswith("r") and end - start < (256 << 20):
                    try:
                        mem.seek(start)
                        chunks.append(mem.read(end - start))
                    except OSError:  # [vvar] and guard pages
                        continue
    except PermissionError:
        pytest.skip("the tests cannot read the runner's memory from the host (not root, or a remote engine)")
    return b"".join(chunks)


async def test_the_runner_keeps_no_earlier_argv_env_stdin_or_output(static: Any, docker_client: Any) -> None:
    def secret(tag: str) -> str:
        return tag + os.urandom(24).hex()

    argv, env, stdin, output = secret("ARGV"), secret("ENVV"), secret("STDI"), secret("OUTP")
    ran = await static.exec(
        ["sh", "-c", 'cat; printf %s "$0$SECRET" | wc -c; echo "$1"', argv, output], env={"SECRET": env}, stdin=stdin
    )
    assert ran.stdout == f"{stdin}{len(argv) + len(env)}\n{output}\n", ran
    await static.write_files({"in.txt": secret("FILE")})  # through the archive API, not the runner
    memory = _runner_memory(docker_client, static.container_id)
    assert b"cannot start the runner's second stage" in memory  # the dump holds the runner (its strings)
    found = [s[:4] for s in (argv, env, stdin, output) if s.encode() in memory or s[8:40].encode() in memory]
    assert found == []


async def test_every_signal_from_the_program_leaves_the_runner_alive(static: Any) -> None:
    # Root's signals are refused to uid 1000 outright; and the runner catches none anyway.
    sent = await static.exec(["sh", "-c", "for s in $(seq 1 64); do kill -$s 1 2>/dev/null && echo $s; done; echo end"])
    assert sent.stdout == "end\n", sent
    status = await static.exec(["grep", "-E", "^(SigCgt|SigIgn|Threads)", "/proc/1/status"])
    fields = dict(re.findall(r"(\w+):\t(\S+)", status.stdout))
    assert int(fields["SigCgt"], 16) == 1 << 32, status  # only the Go runtime's own signal 33
    ignored = int(fields["SigIgn"], 16)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE, signal.SIGXFSZ):
        assert ignored & (1 << (sig - 1)), f"{sig.name} is not ignored by the runner"
    assert (await static.exec(["echo", "alive"])).stdout == "alive\n"


async def test_programs_start_as_the_sandbox_user_with_the_limits(static: Any) -> None:
    probe = "id -u; id -G; nice; cat /proc/self/oom_score_adj; ulimit -n; ulimit -c; grep -E '^(Cap(Eff|Prm)|NoNewPrivs)' /proc/self/status"
    result = await static.exec(["sh", "-c", probe])
    lines = result.stdout.splitlines()
    assert lines[:6] == ["1000", "1000", "10", "1000", "256", "0"], result
    assert "CapEff:\t0000000000000000" in lines and "CapPrm:\t0000000000000000" in lines, result
    assert "NoNewPrivs:\t1" in lines, result


async def test_the_second_stage_reports_what_a_shell_would(static: Any) -> None:
    await static.write_files({"noexec.sh": "echo hi\n", "dir/x": ""})
    not_found = await static.exec(["./nope"])
    assert not_found.exit_code == 127 and "command not found" in not_found.stderr, not_found
    not_executable = await static.exec(["./noexec.sh"])
    assert not_executable.exit_code == 126 and "Permission denied" in not_executable.stderr, not_executable
    ok = await static.run(RunRequest(code="echo $((6 * 7))", language="bash", limits=FAST))
    assert ok.status is Status.OK and ok.stdout == "42\n", ok
