"""One admission and one run cap for every worker process of ``sandboxkit serve --workers N``.

Why a broker and not shared memory: the cap must stay exact when a worker is killed. A counter in
shared memory needs a lock, and a worker killed while it holds the lock (or between taking a slot
and recording it) leaks slots or deadlocks the others. Here the supervisor owns the book
(:class:`SlotBook`) and each worker talks to it over its own socket pair; when a worker dies its
socket reads end-of-file and everything it held or waited for is returned at once, in the same
place that hands slots out. The cost is one round trip per run slot and per admission, a few tens
of microseconds, on a socket that no one else can reach.

The book keeps today's semantics, for the whole server:

* **run slots** (``-j``): at most ``max_concurrency`` runs in flight across all workers, waiters
  served in arrival order across workers (one FIFO, not one per worker);
* **admission** (``--max-queue``, ``--max-queue-mb``): at most ``max_requests`` requests and
  ``max_bytes`` body bytes inside the server, refused at once past either bound.

Wire format: fixed 16-byte records ``<BBxxIq``: an operation, a flag, a request id chosen by the
worker, a value. A grant that reaches a worker after its waiter gave up is sent straight back.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from sandboxkit.server.admission import fits

__all__ = ["BrokerGone", "BrokerLink", "BrokerServer", "BrokerStatistics", "Op", "SlotBook"]

_RECORD = struct.Struct("<BBxxIq")


class Op:
    """Operation codes of the records (worker -> broker below 100, broker -> worker above)."""

    ACQUIRE = 1  # id: wait for a run slot
    CANCEL = 2  # id: the waiter gave up
    RELEASE_SLOT = 3  # give a run slot back
    RESERVE = 4  # id, flag = new request, value = bytes: reply RESERVED
    UNRESERVE = 5  # flag = a request too, value = bytes
    STATS = 6  # id: reply STAT records, then STATS_END
    READY = 7  # the worker serves
    SEAT = 8  # id: take a kept session's seat: reply SEATED
    UNSEAT = 9  # give a seat back
    GRANT = 101  # id
    RESERVED = 102  # id, flag = granted, value = requests inside the server
    STAT = 103  # flag = field index, value
    STATS_END = 104  # id
    SEATED = 105  # id, flag = granted


@dataclass(frozen=True)
class BrokerStatistics:
    """The whole server's occupancy, as the broker sees it."""

    runs_in_flight: int
    runs_waiting: int
    requests_inside: int
    body_bytes_inside: int
    sessions_kept: int
    workers_connected: int
    workers_serving: int
    workers_restarted: int


_STAT_FIELDS = tuple(BrokerStatistics.__dataclass_fields__)


class SlotBook:
    """The run slots, admission budget and session seats of all workers; no I/O, O(1) or O(waiters).

    Args:
        max_concurrency: runs in flight at once, across workers.
        max_requests: requests (running and waiting) inside the server at once.
        max_bytes: body bytes those requests may hold at once.
        max_sessions: kept ``/run_jupyter`` sessions alive at once, across workers (None: no bound here).
    """

    def __init__(
        self, max_concurrency: int, max_requests: int, max_bytes: int, max_sessions: int | None = None
    ) -> None:
        self.max_sessions = max_sessions
        self.seats: Counter[int] = Counter()
        self.max_concurrency = max_concurrency
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.in_flight = 0
        self.requests = 0
        self.bytes = 0
        self.queue: OrderedDict[tuple[int, int], None] = OrderedDict()  # (worker, id), oldest first
        self.slots: Counter[int] = Counter()
        self.held_requests: Counter[int] = Counter()
        self.held_bytes: Counter[int] = Counter()

    def acquire(self, worker: int, request_id: int) -> bool:
        """True: a slot is the worker's now; False: queued (a later :meth:`release` grants it)."""
        if self.in_flight < self.max_concurrency and not self.queue:
            self._grant(worker)
            return True
        self.queue[(worker, request_id)] = None
        return False

    def cancel(self, worker: int, request_id: int) -> None:
        """Forget a waiter (a grant already sent comes back as a release)."""
        self.queue.pop((worker, request_id), None)

    def release(self, worker: int) -> list[tuple[int, int]]:
        """Take one slot back from ``worker``; returns the waiters granted a slot as a result."""
        if self.slots[worker] > 0:
            self.slots[worker] -= 1
            self.in_flight -= 1
        return self._grant_waiters()

    def reserve(self, worker: int, size: int, *, new_request: bool) -> bool:
        """Admission's ``try_reserve`` for the whole server (the first request always fits)."""
        if not fits(self.requests, self.bytes, size, self.max_requests, self.max_bytes, new_request=new_request):
            return False
        self.bytes += size
        self.held_bytes[worker] += size
        if new_request:
            self.requests += 1
            self.held_requests[worker] += 1
        return True

    def unreserve(self, worker: int, size: int, *, request: bool) -> None:
        """Give back what :meth:`reserve` took."""
        size = min(size, self.held_bytes[worker])
        self.bytes -= size
        self.held_bytes[worker] -= size
        if request and self.held_requests[worker] > 0:
            self.requests -= 1
            self.held_requests[worker] -= 1

    def seat(self, worker: int) -> bool:
        """Take a kept session's seat; False when ``max_sessions`` are taken."""
        if self.max_sessions is not None and self.seats.total() >= self.max_sessions:
            return False
        self.seats[worker] += 1
        return True

    def unseat(self, worker: int) -> None:
        """Give a seat back."""
        if self.seats[worker] > 0:
            self.seats[worker] -= 1

    def drop(self, worker: int) -> list[tuple[int, int]]:
        """A worker is gone: return all it held and waited for; returns the waiters granted as a result."""
        self.seats.pop(worker, None)
        for key in [key for key in self.queue if key[0] == worker]:
            del self.queue[key]
        self.in_flight -= self.slots.pop(worker, 0)
        self.requests -= self.held_requests.pop(worker, 0)
        self.bytes -= self.held_bytes.pop(worker, 0)
        return self._grant_waiters()

    def _grant(self, worker: int) -> None:
        self.in_flight += 1
        self.slots[worker] += 1

    def _grant_waiters(self) -> list[tuple[int, int]]:
        granted = []
        while self.queue and self.in_flight < self.max_concurrency:
            key, _ = self.queue.popitem(last=False)
            self._grant(key[0])
            granted.append(key)
        return granted


class _BrokerSide(asyncio.Protocol):
    """The supervisor's end of one worker's socket."""

    def __init__(self, server: BrokerServer, worker: int) -> None:
        self.server = server
        self.worker = worker
        self.transport: asyncio.Transport | None = None
        self._pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's transports are not subclasses)
        self.server.connected[self.worker] = self

    def data_received(self, data: bytes) -> None:
        data = self._pending + data
        end = len(data) - len(data) % _RECORD.size
        self._pending = data[end:]
        for op, flag, request_id, value in _RECORD.iter_unpack(data[:end]):
            self.server.handle(self, op, flag, request_id, value)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.disconnected(self)

    def send(self, op: int, request_id: int, flag: int = 0, value: int = 0) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_RECORD.pack(op, flag, request_id, value))


class BrokerServer:
    """The supervisor's side: a :class:`SlotBook` served to each worker over its socket pair."""

    def __init__(self, book: SlotBook) -> None:
        self.book = book
        self.connected: dict[int, _BrokerSide] = {}
        self.serving: set[int] = set()
        self.restarts = 0
        #: Called with a worker's number when it reports that it serves.
        self.on_ready: Callable[[int], None] = lambda worker: None

    async def attach(self, worker: int, sock: socket.socket) -> None:
        """Serve one worker process, known as ``worker`` (unique per process), on ``sock`` (the supervisor's end)."""
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: _BrokerSide(self, worker), sock)

    def handle(self, side: _BrokerSide, op: int, flag: int, request_id: int, value: int) -> None:
        book, worker = self.book, side.worker
        if op == Op.ACQUIRE:
            if book.acquire(worker, request_id):
                side.send(Op.GRANT, request_id)
        elif op == Op.RELEASE_SLOT:
            self._deliver(book.release(worker))
        elif op == Op.CANCEL:
            book.cancel(worker, request_id)
        elif op == Op.RESERVE:
            ok = book.reserve(worker, value, new_request=bool(flag))
            side.send(Op.RESERVED, request_id, int(ok), book.requests)
        elif op == Op.UNRESERVE:
            book.unreserve(worker, value, request=bool(flag))
        elif op == Op.SEAT:
            side.send(Op.SEATED, request_id, int(book.seat(worker)))
        elif op == Op.UNSEAT:
            book.unseat(worker)
        elif op == Op.READY:
            self.serving.add(worker)
            self.on_ready(worker)
        elif op == Op.STATS:
            stats = self.statistics()
            for index, name in enumerate(_STAT_FIELDS):
                side.send(Op.STAT, request_id, index, getattr(stats, name))
            side.send(Op.STATS_END, request_id)

    def disconnected(self, side: _BrokerSide) -> None:
        if self.connected.get(side.worker) is side:
            del self.connected[side.worker]
            self.serving.discard(side.worker)
        self._deliver(self.book.drop(side.worker))

    def statistics(self) -> BrokerStatistics:
        """The whole server's occupancy."""
        book = self.book
        return BrokerStatistics(
            runs_in_flight=book.in_flight,
            runs_waiting=len(book.queue),
            requests_inside=book.requests,
            body_bytes_inside=book.bytes,
            sessions_kept=book.seats.total(),
            workers_connected=len(self.connected),
            workers_serving=len(self.serving),
            workers_restarted=self.restarts,
        )

    def _deliver(self, grants: list[tuple[int, int]]) -> None:
        for worker, request_id in grants:
            side = self.connected.get(worker)
            if side is None:  # gone between queueing and the grant: take the slot back
                self._deliver(self.book.release(worker))
            else:
                side.send(Op.GRANT, request_id)


class BrokerGone(ConnectionError):
    """The supervisor's broker is gone (the server is stopping, or its supervisor died)."""


class _WorkerSide(asyncio.Protocol):
    def __init__(self, link: BrokerLink) -> None:
        self.link = link
        self._pending = b""

    def data_received(self, data: bytes) -> None:
        data = self._pending + data
        end = len(data) - len(data) % _RECORD.size
        self._pending = data[end:]
        for op, flag, request_id, value in _RECORD.iter_unpack(data[:end]):
            self.link.received(op, flag, request_id, value)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.lost()


class BrokerLink:
    """A worker's end: asks the broker for run slots and admission, and returns them.

    Every method but :meth:`connect` must be called from the loop that connected it.
    """

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[int]] = {}
        self._stats: dict[int, dict[str, int]] = {}
        self.gone = False
        self.on_lost: Callable[[], None] | None = None

    async def connect(self, sock: socket.socket) -> None:
        """Use ``sock`` (the worker's end of its socket pair) from the running loop."""
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_accepted_socket(lambda: _WorkerSide(self), sock)

    def close(self) -> None:
        """Close the socket (the broker returns whatever is still held)."""
        if self._transport is not None:
            self._transport.close()

    async def acquire_slot(self) -> None:
        """Wait for a run slot (cancellable: a grant that arrives later is given back).

        Raises:
            BrokerGone: the broker went away.
        """
        request_id, future = self._ask()
        self._send(Op.ACQUIRE, request_id)
        try:
            await future
        except asyncio.CancelledError:
            if self._waiting.pop(request_id, None) is not None:
                self._send(Op.CANCEL, request_id)
            elif future.done() and not future.cancelled() and future.exception() is None:
                self.release_slot()  # granted in the same instant it was cancelled
            raise

    def release_slot(self) -> None:
        """Give one run slot back."""
        self._send(Op.RELEASE_SLOT, 0)

    def ready(self) -> None:
        """Tell the supervisor that this worker serves."""
        self._send(Op.READY, 0)

    async def reserve(self, size: int, *, new_request: bool) -> tuple[bool, int]:
        """Admission for the whole server: (granted, requests inside the server).

        Raises:
            BrokerGone: the broker went away.
        """
        request_id, future = self._ask()
        self._send(Op.RESERVE, request_id, int(new_request), size)

        def undo(value: int) -> None:
            if value >= 0:
                self.unreserve(size, request=new_request)

        value = await self._reply(request_id, future, undo)
        return (True, value) if value >= 0 else (False, -value - 1)

    def unreserve(self, size: int, *, request: bool) -> None:
        """Give back what :meth:`reserve` took."""
        self._send(Op.UNRESERVE, 0, int(request), size)

    async def take_seat(self) -> bool:
        """A kept session's seat in the whole server's ``max_sessions``; False when all are taken.

        Raises:
            BrokerGone: the broker went away.
        """
        request_id, future = self._ask()
        self._send(Op.SEAT, request_id)

        def undo(seated: int) -> None:
            if seated:
                self.give_seat()

        return bool(await self._reply(request_id, future, undo))

    def give_seat(self) -> None:
        """Give back a seat :meth:`take_seat` took."""
        self._send(Op.UNSEAT, 0)

    async def statistics(self) -> dict[str, int]:
        """The broker's :class:`BrokerStatistics` as a dict.

        Raises:
            BrokerGone: the broker went away.
        """
        request_id, future = self._ask()
        self._stats[request_id] = {}
        self._send(Op.STATS, request_id)
        try:
            await future
            return self._stats[request_id]
        finally:
            self._stats.pop(request_id, None)

    def received(self, op: int, flag: int, request_id: int, value: int) -> None:
        if op == Op.STAT:
            if request_id in self._stats and flag < len(_STAT_FIELDS):
                self._stats[request_id][_STAT_FIELDS[flag]] = value
            return
        future = self._waiting.pop(request_id, None)
        if future is None or future.done():
            if op == Op.GRANT:  # its waiter gave up meanwhile
                self.release_slot()
            return
        if op == Op.RESERVED:
            # granted: value >= 0; refused: -(value + 1), so both carry the requests inside.
            future.set_result(value if flag else -(value + 1))
        elif op == Op.SEATED:
            future.set_result(flag)
        else:
            future.set_result(0)

    def lost(self) -> None:
        self.gone = True
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(BrokerGone("the server's supervisor is gone; the server is stopping"))
        if self.on_lost is not None:
            self.on_lost()

    async def _reply(self, request_id: int, future: asyncio.Future[int], undo: Callable[[int], None]) -> int:
        """The broker's answer; a caller cancelled after the answer arrived hands ``undo`` what it got."""
        try:
            return await future
        except asyncio.CancelledError:
            delivered = self._waiting.pop(request_id, None) is None and future.done() and not future.cancelled()
            if delivered and future.exception() is None:
                undo(future.result())
            raise

    def _ask(self) -> tuple[int, asyncio.Future[int]]:
        if self.gone or self._transport is None:
            raise BrokerGone("the server's supervisor is gone; the server is stopping")
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting[self._next_id] = future
        return self._next_id, future

    def _send(self, op: int, request_id: int, flag: int = 0, value: int = 0) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(_RECORD.pack(op, flag, request_id, value))
