"""The gate and the admission budget of one worker of ``sandboxkit serve --workers N``, held by the broker.

Each worker process keeps the single-process classes' interface (:class:`Gate`,
:class:`Admission`), so the middleware, the routes and the metrics do not know how many workers
there are; only where a slot or a reservation comes from changes: from the supervisor's
:class:`~sandboxkit.server.broker.SlotBook`, one for the whole server. The local counters of
these objects are this worker's share, which is what ``/metrics`` sums across workers.
"""

from __future__ import annotations

from sandboxkit.errors import Transient
from sandboxkit.server.admission import Admission
from sandboxkit.server.broker import BrokerGone, BrokerLink
from sandboxkit.server.gate import Gate

__all__ = ["SharedAdmission", "SharedGate"]


class SharedGate(Gate):
    """Run slots from the broker: ``max_concurrency`` is the whole server's cap, FIFO across workers.

    Raises:
        ValueError: as :class:`Gate`.
    """

    def __init__(self, link: BrokerLink, max_concurrency: int, queue_timeout_s: float | None = None) -> None:
        super().__init__(max_concurrency, queue_timeout_s)
        self.link = link
        self._held = 0

    async def _acquire(self) -> object:
        """One of the server's slots, FIFO across workers.

        Raises:
            QueueTimeout: ``queue_timeout_s`` is set and no slot freed up within it.
            Transient: the supervisor is gone (the server is stopping); answered as an infra error.
        """
        try:
            await self._wait(self.link.acquire_slot)
        except BrokerGone as exc:
            raise Transient(str(exc)) from exc
        self._held += 1
        return None

    def _release(self, token: object) -> None:
        self._held -= 1
        self.link.release_slot()

    def _in_flight(self) -> int:
        return self._held


class SharedAdmission(Admission):
    """Admission against the whole server's budget; ``requests`` and ``bytes`` count this worker's share.

    Raises:
        ValueError: as :class:`Admission`.
    """

    def __init__(
        self, link: BrokerLink, max_requests: int, max_bytes: int, max_body_bytes: int, body_timeout_s: float
    ) -> None:
        super().__init__(max_requests, max_bytes, max_body_bytes, body_timeout_s)
        self.link = link
        self.server_requests = 0

    def try_reserve(self, size: int, *, new_request: bool) -> bool:
        """Not decidable in this process alone: use :meth:`reserve`."""
        raise NotImplementedError("a worker's admission is decided by the broker: await reserve()")

    async def reserve(self, size: int, *, new_request: bool) -> bool:
        """Reserve in the whole server's budget; a stopping server refuses (504, retried by clients)."""
        try:
            granted, self.server_requests = await self.link.reserve(size, new_request=new_request)
        except BrokerGone:
            return False
        if granted:
            self.bytes += size
            self.requests += new_request
        return granted

    def inside(self) -> str:
        """The whole server's requests, as the broker last counted them (bytes are per worker)."""
        return f"{self.server_requests} requests"

    def release(self, size: int, *, request: bool) -> None:
        """Give back what :meth:`reserve` took, here and at the broker."""
        self.bytes -= size
        if request:
            self.requests -= 1
        self.link.unreserve(size, request=request)
