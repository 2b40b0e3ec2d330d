"""The host end of the runner channel: framed requests over a container's attached socket.

Docker hands back the attach connection as a raw socket. With ``tty=False`` everything the
container writes arrives *multiplexed*: 8-byte headers ``(stream, 0, 0, 0, size>I)`` each
followed by ``size`` bytes of stdout (1) or stderr (2); what we write goes unframed to the
runner's stdin. On top of stdout the runner speaks its own framing (see ``_runner.py``):
``>II`` = (json_len, blob_len), a JSON header, a blob area.

The socket is non-blocking and awaited with anyio, so a run in flight costs the event loop
nothing and needs no thread (the docker SDK is synchronous; only its API calls go to threads).
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio

__all__ = ["ChannelClosed", "RunnerChannel", "encode_request"]

log = logging.getLogger(__name__)

_FRAME = struct.Struct(">II")
_MUX = struct.Struct(">BxxxI")
_RECV_CHUNK = 1 << 18
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT
_T = TypeVar("_T")

_wait_readable = getattr(anyio, "wait_readable", None) or anyio.wait_socket_readable
_wait_writable = getattr(anyio, "wait_writable", None) or anyio.wait_socket_writable
_notify_closing = getattr(anyio, "notify_closing", lambda sock: None)


class ChannelClosed(Exception):
    """The runner or the connection went away; the text says what was last heard on stderr."""


def encode_request(header: dict[str, Any], blobs: Sequence[bytes]) -> bytes:
    """One runner frame. Blob offsets in ``header`` refer to ``blobs`` concatenated in order."""
    data = json.dumps(header, separators=(",", ":")).encode()
    total = sum(len(b) for b in blobs)
    return b"".join([_FRAME.pack(len(data), total), data, *blobs])


class RunnerChannel:
    """Request/response with one runner; one request at a time (callers hold the sandbox's lock).

    Args:
        sock: the attached socket (plain or TLS).
        keepalive: the SDK object that owns the socket; kept referenced so it is not closed under us.
        name: short container id, for log lines.
    """

    def __init__(self, sock: socket.socket, keepalive: Any, name: str) -> None:
        self._sock = sock
        self._keepalive = keepalive
        self._name = name
        self._mux = bytearray()  # raw bytes from docker, still multiplexed
        self._stdout = bytearray()  # demultiplexed runner stdout (its frames)
        self._stderr_tail = bytearray()
        self._eof = False
        self.closed = False
        sock.setblocking(False)

    @property
    def stderr_tail(self) -> str:
        """The last lines the runner wrote to stderr (why it died, usually)."""
        return self._stderr_tail[-2000:].decode("utf-8", "replace")

    async def request(self, header: dict[str, Any], blobs: Sequence[bytes] = ()) -> tuple[dict[str, Any], bytes]:
        """Send one frame and wait for the runner's reply frame.

        Raises:
            ChannelClosed: the connection ended or broke.
        """
        await self._send(encode_request(header, blobs))
        return await self.receive()

    async def receive(self) -> tuple[dict[str, Any], bytes]:
        """The next frame from the runner.

        Raises:
            ChannelClosed: the connection ended before a whole frame arrived.
        """
        while True:
            if len(self._stdout) >= _FRAME.size:
                json_len, blob_len = _FRAME.unpack_from(self._stdout)
                end = _FRAME.size + json_len + blob_len
                if len(self._stdout) >= end:
                    header = json.loads(bytes(self._stdout[_FRAME.size : _FRAME.size + json_len]))
                    blob = bytes(self._stdout[_FRAME.size + json_len : end])
                    del self._stdout[:end]
                    return header, blob
            await self._fill()

    async def _fill(self) -> None:
        """Read once from the socket and demultiplex what arrived."""
        if self._eof or self.closed:
            raise ChannelClosed(f"runner of container {self._name} is gone; its stderr: {self.stderr_tail!r}")
        chunk = await self._recv()
        if not chunk:
            self._eof = True
            raise ChannelClosed(f"runner of container {self._name} hung up; its stderr: {self.stderr_tail!r}")
        self._mux += chunk
        while len(self._mux) >= _MUX.size:
            stream, size = _MUX.unpack_from(self._mux)
            if len(self._mux) < _MUX.size + size:
                break
            payload = self._mux[_MUX.size : _MUX.size + size]
            del self._mux[: _MUX.size + size]
            if stream == 1:
                self._stdout += payload
            else:
                self._stderr_tail += payload
                del self._stderr_tail[:-8192]
                log.debug("runner %s stderr: %s", self._name, payload.decode("utf-8", "replace").rstrip())

    async def _recv(self) -> bytes:
        return await self._when_ready(lambda: self._sock.recv(_RECV_CHUNK), ssl.SSLWantReadError, _wait_readable)

    async def _send(self, data: bytes) -> None:
        if self.closed or self._eof:
            raise ChannelClosed(f"runner of container {self._name} is gone; its stderr: {self.stderr_tail!r}")
        view = memoryview(data)
        while view:
            sent = await self._when_ready(
                functools.partial(self._sock.send, view), ssl.SSLWantWriteError, _wait_writable
            )
            view = view[sent:]

    async def _when_ready(
        self, op: Callable[[], _T], want: type[ssl.SSLError], wait: Callable[[socket.socket], Awaitable[None]]
    ) -> _T:
        """``op`` on the non-blocking socket, retried after ``wait`` whenever it would block (``want``: TLS's
        way of saying so). A closed or broken connection is :class:`ChannelClosed`, for reads and writes alike."""
        while True:
            try:
                return op()
            except (BlockingIOError, want):
                try:
                    await wait(self._sock)
                except (anyio.ClosedResourceError, anyio.BusyResourceError) as exc:
                    raise ChannelClosed(f"connection to the runner of {self._name} was closed") from exc
            except OSError as exc:
                raise ChannelClosed(f"connection to the runner of {self._name} broke: {exc}") from exc

    # -------------------------------------------------- an unframed stream (a kernel's exec socket)

    @property
    def ended(self) -> bool:
        """Closed here, or hung up by the other end."""
        return self.closed or self._eof

    async def send_raw(self, data: bytes) -> None:
        """Send ``data`` as it is, without a frame (the kernel protocol frames its own messages).

        Raises:
            ChannelClosed: the connection ended or broke.
        """
        await self._send(data)

    async def read_stdout(self) -> bytes:
        """What the other end wrote to stdout since the last call, waiting for some; ``b""`` once it ended."""
        while not self._stdout:
            try:
                await self._fill()
            except ChannelClosed:
                return b""
        data = bytes(self._stdout)
        self._stdout.clear()
        return data

    def peer_open(self) -> bool:
        """Whether the other end still holds the connection, asked without reading (a peek)."""
        try:
            peeked = self._sock.recv(1, _PEEK)
        except (BlockingIOError, InterruptedError, ValueError):  # ValueError: TLS sockets cannot peek
            return True
        except OSError:
            return False
        return bool(peeked)  # b"": it hung up

    def close(self) -> None:
        """Close the socket (the runner sees EOF and exits). Idempotent, never raises."""
        if self.closed:
            return
        self.closed = True
        try:
            _notify_closing(self._sock)  # wake a task waiting on it instead of leaving it on a dead fd
        except Exception:  # no event loop (interpreter exit): nobody can be waiting
            pass
        try:
            self._sock.close()
        except OSError:
            pass
        closer = getattr(self._keepalive, "close", None)
        if closer is not None:
            try:
                closer()
            except Exception:  # the socket is already closed; nothing else to release
                pass
