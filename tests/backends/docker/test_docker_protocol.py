"""The host end of the runner protocol, without an engine: Docker's stream multiplexing, the
runner's framing, and how the runner's facts become a status. (No container needed: these run
everywhere, so a protocol bug shows up even where Docker is absent.)"""

from __future__ import annotations

import json
import signal
import socket
import struct

import anyio
import pytest

from sandboxkit.backends.docker._channel import ChannelClosed, RunnerChannel, encode_request
from sandboxkit.backends.docker._results import classify, make_step, split_outputs
from sandboxkit.models import Limits, Status


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
    steps = [{"out_len": 2, "err_len": 1}, {"out_len": 0, "err_len": 3}]
    assert split_outputs(steps, b"abcdef") == [(b"ab", b"c"), (b"", b"def")]
    step = make_step(["python3"], cwd="/work", env={}, timeout_s=2.5, limits=Limits(), stdin=(4, 0))
    assert step["cpu"] == 4 and "stdin" not in step and step["fsize"] == 64 << 20
    compile_step = make_step(["gcc"], cwd="/work", env={}, timeout_s=30, limits=Limits(), compile_step=True)
    assert compile_step["gate"] and compile_step["fsize"] is None
