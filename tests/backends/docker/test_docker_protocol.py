"""The host end of the runner protocol, without an engine: Docker's stream multiplexing, the
runner's framing, and how the runner's facts become a status. (No container needed: these run
everywhere, so a protocol bug shows up even where Docker is absent.)"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
import threading
from pathlib import Path

import anyio
import pytest

from sandboxkit.backends.docker._channel import ChannelClosed, RunnerChannel, encode_request
from sandboxkit.backends.docker._results import (
    Blobs,
    classify,
    head_tail_split,
    join_head_tail,
    make_step,
    split_outputs,
)
from sandboxkit.models import Limits, Status
from sandboxkit.output import cut_head_tail, cut_marker


def mux(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def runner_frame(header: dict[str, object], blob: bytes = b"") -> bytes:
    data = json.dumps(header).encode()
    return struct.pack(">II", len(data), len(blob)) + data + blob


async def test_frames_survive_arbitrary_chunking_and_interleaved_stderr() -> None:
    host, engine = socket.socketpair()
    channel = RunnerChannel(host, None, "test")
    reply = runner_frame({"id": 1, "ok": True}, b"OUTPUT\xff")
    wire = mux(2, b"runner log line\n") + mux(1, reply[:5]) + mux(2, b"more\n") + mux(1, reply[5:])
    wire += mux(1, runner_frame({"id": 2, "ok": True}))
    try:
        async with anyio.create_task_group() as tg:

            async def trickle() -> None:
                for i in range(0, len(wire), 3):  # three bytes at a time: headers split too
                    engine.sendall(wire[i : i + 3])
                    await anyio.sleep(0)

            tg.start_soon(trickle)
            header, blob = await channel.request({"op": "ping"}, [b"abc"])
            assert header == {"id": 1, "ok": True} and blob == b"OUTPUT\xff"
            assert (await channel.receive())[0]["id"] == 2
        sent = engine.recv(1 << 16)
        json_len, blob_len = struct.unpack(">II", sent[:8])
        assert json.loads(sent[8 : 8 + json_len]) == {"op": "ping"} and sent[8 + json_len :] == b"abc" and blob_len == 3
        assert "more" in channel.stderr_tail
    finally:
        channel.close()
        engine.close()


async def test_hang_up_is_channel_closed_with_the_runners_last_words() -> None:
    host, engine = socket.socketpair()
    channel = RunnerChannel(host, None, "test")
    engine.sendall(mux(2, b"Traceback: runner exploded\n") + mux(1, b"\x00\x00"))
    engine.close()
    with pytest.raises(ChannelClosed, match="runner exploded"):
        await channel.receive()
    channel.close()
    channel.close()  # idempotent


def test_encode_request_layout() -> None:
    frame = encode_request({"op": "run"}, [b"code", b"stdin"])
    json_len, blob_len = struct.unpack(">II", frame[:8])
    assert frame[8 : 8 + json_len] == b'{"op":"run"}' and blob_len == 9 and frame.endswith(b"codestdin")


@pytest.mark.parametrize(
    ("facts", "stderr", "status"),
    [
        ({"exit": 0}, b"", Status.OK),
        ({"exit": 3}, b"", Status.FAILED),
        ({"exit": None, "signal": 9, "timed_out": True}, b"", Status.TIMEOUT),
        ({"exit": None, "signal": int(signal.SIGXCPU)}, b"", Status.TIMEOUT),
        ({"exit": None, "signal": 9, "oom": True}, b"", Status.MEMORY_EXCEEDED),
        ({"exit": 0, "oom": True}, b"", Status.OK),  # a helper was OOM-killed but the program succeeded
        ({"exit": 1}, b"Traceback...\nMemoryError\n", Status.MEMORY_EXCEEDED),
        ({"exit": 0}, b"MemoryError is just a word here", Status.OK),
        ({"exit": None, "signal": 9, "over": True, "timed_out": True}, b"", Status.OUTPUT_LIMIT),
    ],
)
def test_classify(facts: dict[str, object], stderr: bytes, status: Status) -> None:
    assert classify(facts, b"", stderr).status is status


def test_split_outputs_and_steps() -> None:
    # facts per stream: [head bytes, tail bytes, total]; a cut stream gets the shared marker.
    steps = [{"out": [2, 0, 2], "err": [1, 0, 1]}, {"out": [0, 0, 0], "err": [1, 2, 9]}]
    assert split_outputs(steps, b"abcdef") == [(b"ab", b"c"), (b"", b"d" + cut_marker(6) + b"ef")]
    blobs = Blobs()
    blobs.add(b"code")
    step = make_step(["python3"], cwd="/work", env={"K": "v"}, timeout_s=2.5, limits=Limits(), blobs=blobs)
    assert step["cpu"] == 4 and "stdin" not in step and step["fsize"] == 64 << 20
    assert (step["head"], step["tail"], step["stop"]) == (1 << 19, 1 << 19, 64 << 20)
    compile_step = make_step(
        ["gcc"], cwd="/work", env={}, timeout_s=30, limits=Limits(), blobs=blobs, stdin=b"in", compile_step=True
    )
    assert compile_step["gate"] and compile_step["fsize"] is None
    area = b"".join(blobs.parts)
    off, size = compile_step["stdin"]
    assert area[off : off + size] == b"in"


def test_argv_and_env_travel_only_in_the_blob_area() -> None:
    # The runner zeroes the blob area after each reply and never decodes it itself; a value in
    # the JSON header would stay in its heap, where later runs (forked from it) could read it.
    blobs = Blobs()
    step = make_step(
        ["prog", "ARG-SECRET"], cwd="/work/d", env={"TOKEN": "ENV-SECRET"}, timeout_s=1, limits=Limits(), blobs=blobs
    )
    header = json.dumps({"op": "run", "steps": [step]})
    assert "SECRET" not in header and "/work/d" not in header
    off, size = step["private"]
    private = json.loads(b"".join(blobs.parts)[off : off + size])
    assert private == {"argv": ["prog", "ARG-SECRET"], "env": {"TOKEN": "ENV-SECRET"}, "cwd": "/work/d"}


def _through_the_runner(data: bytes, limits: Limits) -> tuple[bytes, bool, bool]:
    """``data`` written to a pipe and collected by the runner's own :class:`Sink`, then joined by the host."""
    from sandboxkit.backends.docker import _runner

    head, tail = head_tail_split(limits)
    sink = _runner.Sink(0, head, tail, limits.stop_bytes())
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        for i in range(0, len(data), 7000):  # odd chunks: the ring wraps mid-read
            os.write(write_fd, data[i : i + 7000])
        os.close(write_fd)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        while not sink.read(read_fd):
            pass
    finally:
        writer.join()
        os.close(read_fd)
    text, cut, _ = join_head_tail(sink.facts(), b"".join(bytes(v) for v in sink.views()), 0)
    return text, cut, sink.over


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 4096, 123_457])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_the_runners_head_and_tail_equal_the_shared_cut(size: int, fraction: float) -> None:
    data = random.Random(size).randbytes(size)
    limits = Limits(output_bytes=1000, output_head_fraction=fraction)
    text, cut, over = _through_the_runner(data, limits)
    assert (text, cut) == cut_head_tail(data, 1000, fraction)
    assert not over


def test_the_runner_flags_a_stream_past_stop_bytes() -> None:
    limits = Limits(output_bytes=100, output_stop_bytes=50_000)
    assert _through_the_runner(b"x" * 50_000, limits)[2] is False
    text, cut, over = _through_the_runner(b"x" * 50_001, limits)
    assert over and cut and text == cut_head_tail(b"x" * 50_001, 100)[0]


# ----------------------------------------------------------------------------- the static runner's build


def test_static_runner_cache_key_follows_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandboxkit.backends.docker import _static

    copy = tmp_path / "runner"
    copy.mkdir()
    for path in _static.SOURCE_DIR.iterdir():
        if path.suffix == ".go" or path.name == "go.mod":
            (copy / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(_static, "SOURCE_DIR", copy)
    before = _static.source_hash()
    (copy / "main.go").write_text((copy / "main.go").read_text() + "\n// changed\n")
    assert _static.source_hash() != before  # a changed runner is rebuilt, never run stale


def test_static_runner_without_go_or_with_a_bad_binary_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandboxkit.backends.docker import _static

    monkeypatch.setenv(_static.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(_static.RUNNER_BIN_ENV, raising=False)
    with pytest.raises(_static.StaticRunnerUnavailable, match="golang-go"):
        _static.static_runner(build=False)
    monkeypatch.setenv(_static.RUNNER_BIN_ENV, str(tmp_path / "missing"))
    with pytest.raises(_static.StaticRunnerUnavailable, match="not an executable file"):
        _static.static_runner()


def test_bad_runner_option_is_an_invalid_request() -> None:
    from sandboxkit.backends.docker import DockerBackend
    from sandboxkit.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match=r"option 'runner'='go': Input should be 'auto', 'static' or 'python'"):
        DockerBackend(runner="go")


def test_static_runner_refuses_to_run_outside_a_container() -> None:
    # kill(-1) and wiping the workspace are only safe as PID 1 of a container of its own.
    import subprocess

    from sandboxkit.backends.docker import _static

    try:
        binary = _static.static_runner()
    except _static.StaticRunnerUnavailable as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))
    done = subprocess.run([str(binary), "/nonexistent", "1000"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "refusing to run outside a container" in done.stderr
