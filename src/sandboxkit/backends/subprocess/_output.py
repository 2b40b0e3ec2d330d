"""Drain a program's stdout/stderr and feed its stdin while it runs, without threads.

Why by hand instead of ``asyncio.subprocess``: the program may be started by a fork server
inside the sandbox rather than by us, so all we hold are pipe file descriptors. Reading them
with ``loop.add_reader`` costs a few microseconds per chunk, never blocks, and keeps draining
(so the writer never blocks on a full pipe) however long a stream gets.

Long output keeps both ends (:class:`sandboxkit.output.HeadTail`): a program that prints a lot
and then fails puts its traceback at the end, which is what a grader or a model needs to see.
The program runs on past ``output_bytes``; only a stream passing ``stop_bytes`` stops it.

Each chunk read is also handed to the caller's ``on_stdout`` / ``on_stderr`` sink as it arrives
(streaming, :mod:`sandboxkit.streaming`), up to ``stop_bytes`` per stream.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from sandboxkit.backends.subprocess._status import Outcome
from sandboxkit.backends.subprocess._watch import Watcher
from sandboxkit.models import Limits
from sandboxkit.output import HeadTail
from sandboxkit.streaming import Sink

__all__ = ["Drain", "OutputLimits"]

CHUNK = 1 << 16
#: Reads per stream of :meth:`Drain.read_now` (a full default pipe is one or two).
READ_NOW_CHUNKS = 8


@dataclass(frozen=True)
class OutputLimits:
    """How much of each stream is kept, how it is split, when the program is stopped, and
    where the raw chunks also go as they arrive (``sinks``: stdout's and stderr's, or None)."""

    keep: int
    head_fraction: float = 0.5
    stop: int = 64 << 20
    sinks: tuple[Sink | None, Sink | None] = (None, None)

    @classmethod
    def of(cls, limits: Limits, sinks: tuple[Sink | None, Sink | None] = (None, None)) -> OutputLimits:
        return cls(limits.output_bytes, limits.output_head_fraction, limits.stop_bytes(), sinks)


class _Reader:
    __slots__ = ("done", "fd", "kept", "sink")

    def __init__(self, fd: int, output: OutputLimits, sink: Sink | None) -> None:
        self.fd = fd
        self.kept = HeadTail(output.keep, output.head_fraction)
        self.sink = sink
        self.done = False


class Drain:
    """Collects two output pipes and writes one input pipe on the running event loop.

    Args:
        stdout_fd / stderr_fd: read ends of the program's output pipes (owned; closed here).
        stdin_fd: write end of the program's input pipe (owned; closed here), or ``None``.
        stdin_data: bytes to feed; the pipe is closed afterwards so the program sees EOF.
        output: bytes kept per stream (head + tail) and the stop threshold.
        on_stop: called once, the first time a stream passes ``output.stop`` (kills the program).
        watcher: where the output pipes are watched (a fork server's epoll set, see ``_watch``,
            attached to the running loop); ``None``: the loop's own ``add_reader``.
        nonblocking: the three descriptors are non-blocking already (made with ``O_NONBLOCK``).
        held: the output pipes outlive this command (a fork server's held pair, see ``ForkServer``):
            the owner watches them and calls :meth:`readable`, and closes them; they reach no EOF
            while the server lives, so :meth:`read_now` ends when they are empty instead.
    """

    def __init__(
        self,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None,
        stdin_data: bytes,
        output: OutputLimits,
        on_stop: Callable[[], None],
        watcher: Watcher | None = None,
        *,
        nonblocking: bool = False,
        held: bool = False,
    ) -> None:
        self._loop = watcher.loop if watcher is not None else asyncio.get_running_loop()
        self._watcher = watcher
        self._held = held
        self._readers = [_Reader(stdout_fd, output, output.sinks[0]), _Reader(stderr_fd, output, output.sinks[1])]
        self._stop_at = output.stop
        self._on_stop = on_stop
        #: A stream passed the stop threshold and the program was stopped (status ``output_limit``).
        self.stopped = False
        self._eof = self._loop.create_future()
        self._open = 2
        for reader in self._readers:
            if held:
                continue
            if not nonblocking:
                os.set_blocking(reader.fd, False)
            if watcher is not None:
                watcher.add(reader.fd, functools.partial(self._on_readable, reader))
            else:
                self._loop.add_reader(reader.fd, self._on_readable, reader)
        self._stdin_fd = stdin_fd
        self._stdin_view = memoryview(stdin_data)
        self._writing = False
        if stdin_fd is not None:
            if stdin_data:
                if not nonblocking:
                    os.set_blocking(stdin_fd, False)
                self._loop.add_writer(stdin_fd, self._on_writable)
                self._writing = True
            else:
                self._close_stdin()

    def outcome(self, code: int, duration_s: float, *, timed_out: bool, oom_killed: bool = False) -> Outcome:
        """What the process left: the output kept, and how it ended.

        ``code`` is the exit code, or minus the signal that killed it (``Popen.returncode``'s form);
        both ways of running a program here (from the host, through a fork server) end with this.
        """
        out, err = self._readers[0].kept, self._readers[1].kept
        return Outcome(
            returncode=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            stdout=out.value(),
            stderr=err.value(),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            duration_s=duration_s,
            timed_out=timed_out,
            output_limit=self.stopped,
            oom_killed=oom_killed,
        )

    def _on_readable(self, reader: _Reader) -> None:
        self._read(reader)

    def readable(self, index: int) -> None:
        """Stream ``index`` (0: stdout, 1: stderr) is readable: its owner's watch calls this (``held``)."""
        reader = self._readers[index]
        if not reader.done:
            self._read(reader)

    def _read(self, reader: _Reader) -> bool:
        """Read one chunk of ``reader``; whether it got data (``False``: nothing there now, or EOF)."""
        try:
            data = os.read(reader.fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._finish_reader(reader)
            return False
        before = reader.kept.total
        reader.kept.feed(data)
        if reader.sink is not None and before < self._stop_at:
            reader.sink(data[: self._stop_at - before])
        if reader.kept.total > self._stop_at and not self.stopped:
            self.stopped = True
            self._on_stop()
        return True

    def read_now(self, max_chunks: int = READ_NOW_CHUNKS) -> bool:
        """Read what the pipes hold now, without waiting; whether both reached EOF.

        Called once the program is known to be over: its writers are dead, so the pipes hold
        their last bytes and then EOF, and reading them here saves a timed wait on the loop (a
        timer and one more wake-up per run). At most ``max_chunks`` reads per stream, so a writer
        that somehow lives on cannot keep the host here; the caller then waits with a timeout.
        ``held`` pipes have no EOF while their server lives: they are read until empty, and the
        answer is whether both were emptied.
        """
        drained = True
        for reader in self._readers:
            for _ in range(max_chunks):
                if reader.done or not self._read(reader):
                    break
            else:
                drained = False
        return drained if self._held else self._open == 0

    def _finish_reader(self, reader: _Reader) -> None:
        if reader.done:
            return
        reader.done = True
        if self._held:  # the owner's pipes: EOF means their server is gone
            self._open -= 1
            return
        if self._watcher is not None:
            self._watcher.remove(reader.fd)
        else:
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
        if self._writing:
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
