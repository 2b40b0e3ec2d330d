"""Drain a program's stdout/stderr and feed its stdin while it runs, without threads.

Why by hand instead of ``asyncio.subprocess``: the program may be started by a fork server
inside the sandbox rather than by us, so all we hold are pipe file descriptors. Reading them
with ``loop.add_reader`` costs a few microseconds per chunk, never blocks, and lets us stop
keeping bytes (but keep draining, so the writer never blocks on a full pipe) once a stream
passes its cap.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable

__all__ = ["Drain"]

CHUNK = 1 << 16


class _Reader:
    __slots__ = ("buf", "cap", "done", "fd", "truncated")

    def __init__(self, fd: int, cap: int) -> None:
        self.fd = fd
        self.cap = cap
        self.buf = bytearray()
        self.truncated = False
        self.done = False


class Drain:
    """Collects two output pipes and writes one input pipe on the running event loop.

    Args:
        stdout_fd / stderr_fd: read ends of the program's output pipes (owned; closed here).
        stdin_fd: write end of the program's input pipe (owned; closed here), or ``None``.
        stdin_data: bytes to feed; the pipe is closed afterwards so the program sees EOF.
        cap: bytes kept per stream; past it ``on_overflow`` is called once.
        on_overflow: called the first time a stream passes the cap (kills the program).
    """

    def __init__(
        self,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None,
        stdin_data: bytes,
        cap: int,
        on_overflow: Callable[[], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._readers = [_Reader(stdout_fd, cap), _Reader(stderr_fd, cap)]
        self._on_overflow = on_overflow
        self.overflowed = False
        self._eof = self._loop.create_future()
        self._open = 2
        for reader in self._readers:
            os.set_blocking(reader.fd, False)
            self._loop.add_reader(reader.fd, self._on_readable, reader)
        self._stdin_fd = stdin_fd
        self._stdin_view = memoryview(stdin_data)
        if stdin_fd is not None:
            if stdin_data:
                os.set_blocking(stdin_fd, False)
                self._loop.add_writer(stdin_fd, self._on_writable)
            else:
                self._close_stdin()

    @property
    def stdout(self) -> bytes:
        return bytes(self._readers[0].buf)

    @property
    def stderr(self) -> bytes:
        return bytes(self._readers[1].buf)

    @property
    def stdout_truncated(self) -> bool:
        return self._readers[0].truncated

    @property
    def stderr_truncated(self) -> bool:
        return self._readers[1].truncated

    def _on_readable(self, reader: _Reader) -> None:
        try:
            data = os.read(reader.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._finish_reader(reader)
            return
        room = reader.cap - len(reader.buf)
        if len(data) > room:
            reader.buf += data[: max(room, 0)]
            reader.truncated = True
            if not self.overflowed:
                self.overflowed = True
                self._on_overflow()
        else:
            reader.buf += data

    def _finish_reader(self, reader: _Reader) -> None:
        if reader.done:
            return
        reader.done = True
        self._loop.remove_reader(reader.fd)
        os.close(reader.fd)
        self._open -= 1
        if self._open == 0 and not self._eof.done():
            self._eof.set_result(None)

    def _on_writable(self) -> None:
        assert self._stdin_fd is not None
        try:
            written = os.write(self._stdin_fd, self._stdin_view[:CHUNK])
        except BlockingIOError:
            return
        except OSError as exc:  # EPIPE: the program stopped reading; that is its business
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
            self._close_stdin()
            return
        self._stdin_view = self._stdin_view[written:]
        if not self._stdin_view:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin_fd is None:
            return
        fd, self._stdin_fd = self._stdin_fd, None
        self._loop.remove_writer(fd)
        os.close(fd)

    async def wait_eof(self, timeout: float | None) -> bool:
        """Wait until both output pipes reach EOF; False if ``timeout`` passed first."""
        if self._eof.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self._eof), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Stop watching and close every descriptor still open. Idempotent."""
        for reader in self._readers:
            self._finish_reader(reader)
        self._close_stdin()
