"""One epoll set per fork server, watched by the event loop as a single reader (issue 30: host CPU per run).

A command waits on three descriptors: the server's socket (the exit report) and the program's stdout
and stderr pipes. Through ``loop.add_reader`` each costs about 3 microseconds of Python to add and as
much to remove on asyncio's selector loop: some 16 microseconds of a warm run's host CPU. Here a command
registers them with one C call each in the server's own epoll set; the loop watches that set as one
reader for as long as the server lives, and when it turns readable one callback runs every ready
descriptor's callback. Descriptors are removed from the set before they are closed, so a reused number
never reaches an old callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import Callable

__all__ = ["Watcher"]


class Watcher:
    """Read-readiness callbacks for a fork server's descriptors, on whichever loop runs its commands."""

    def __init__(self) -> None:
        self._epoll: select.epoll | None = select.epoll()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the set is attached to (see :meth:`attach`)."""
        assert self._loop is not None, "Watcher.attach first"
        return self._loop

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the set on ``loop`` (the running one; a command calls this once, before :meth:`add`).

        Passed in rather than looked up per descriptor: Python 3.11's ``get_running_loop`` makes a
        ``getpid`` system call each time.

        Raises:
            ConnectionError: the server was killed (:meth:`close`).
        """
        epoll = self._epoll
        if epoll is None or self._closing:
            raise ConnectionError("fork server closed")
        if loop is not self._loop:  # first use, or a new loop (the last one closed)
            self._detach()
            loop.add_reader(epoll.fileno(), self.dispatch)
            self._loop = loop

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the attached loop whenever ``fd`` is readable, until :meth:`remove`.

        Raises:
            ConnectionError: the server was killed (:meth:`close`).
        """
        epoll = self._epoll
        if epoll is None or self._closing:
            raise ConnectionError("fork server closed")
        epoll.register(fd, select.EPOLLIN)
        self._callbacks[fd] = callback

    def remove(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed). Idempotent."""
        if self._callbacks.pop(fd, None) is not None and self._epoll is not None:
            try:  # not ``contextlib.suppress``: three calls more, three times a run
                self._epoll.unregister(fd)
            except (OSError, ValueError):  # closed already (a killed server's socket)
                pass
        if self._closing and not self._callbacks:
            self._shutdown()

    def dispatch(self) -> None:
        """Run the callbacks of the descriptors readable now (the loop calls this when the set is readable)."""
        epoll = self._epoll
        if epoll is None:
            return
        for fd, _ in epoll.poll(0):
            callback = self._callbacks.get(fd)
            if callback is not None:
                callback()

    def _detach(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed() and self._epoll is not None:
            loop.remove_reader(self._epoll.fileno())

    def close(self) -> None:
        """Close the set once nothing is watched any more. Idempotent; callable from any thread.

        A command still draining a killed server's pipes keeps its callbacks (the kill is what ends
        every writer, so their EOF follows at once); the last :meth:`remove` closes the set then.
        """
        self._closing = True
        if not self._callbacks:
            self._shutdown()

    def _shutdown(self) -> None:
        # From a thread other than the loop's (an emergency cleanup), the loop drops its reader on
        # its own thread before the set is closed: a closed descriptor still in asyncio's selector
        # would break the next ``add_reader`` that gets its number.
        loop = self._loop
        if loop is not None and not loop.is_closed() and loop.is_running():
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                with contextlib.suppress(RuntimeError):  # closed meanwhile: its selector is gone too
                    loop.call_soon_threadsafe(self._shutdown)
                    return
        self._detach()
        epoll, self._epoll = self._epoll, None
        if epoll is not None:
            epoll.close()
