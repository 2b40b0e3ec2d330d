"""How one worker of ``sandboxkit serve --workers N`` reaches the others.

Each worker serves the same app on a second listener, a Unix socket in the server's private
run directory (mode 0700, made by the supervisor), next to the TCP port all workers share.
Through it a worker:

* **forwards a kept ``/run_jupyter`` session's request to the worker that holds it.** A session
  lives in one process (its kernel is that process's child), and the kernel decides which worker
  accepts a connection; so the session id names its worker (inside the part its MAC covers) and a
  request that reaches another worker is sent on, body and ``Authorization`` header unchanged;
* **collects the other workers' ``/metrics`` and ``/v1/stats``** (``?scope=worker``: that worker
  alone), so either endpoint answers for the whole server whichever worker serves it.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from sandboxkit.server.broker import BrokerLink

__all__ = ["WORKER_SCOPE", "Peers", "WorkerIdentity"]

#: Query string that asks a worker for its own numbers only (what a peer sends when it sums them).
WORKER_SCOPE = "worker"

_HOP_HEADERS = frozenset({"authorization", "content-type"})


@dataclass(frozen=True)
class WorkerIdentity:
    """Who this worker is among the server's workers.

    Attributes:
        index: 0 .. count - 1; a replacement keeps the index of the worker it replaces.
        count: workers of the server.
        run_dir: the server's private directory, holding ``worker-<index>.sock`` of each worker.
        session_key: the MAC key of kept-session ids, the same in every worker (and in a
            replacement, so an id of a killed worker is known as lost rather than forged).
        link: this worker's connection to the broker (run slots and admission).
    """

    index: int
    count: int
    run_dir: str
    session_key: bytes
    link: BrokerLink = field(repr=False)

    def socket_path(self, index: int) -> str:
        """The Unix socket of worker ``index``."""
        return os.path.join(self.run_dir, f"worker-{index}.sock")


class Peers:
    """HTTP clients to the other workers' Unix sockets (made on first use, closed with the app)."""

    def __init__(self, me: WorkerIdentity) -> None:
        self.me = me
        self._clients: dict[int, httpx.AsyncClient] = {}

    def _client(self, index: int) -> httpx.AsyncClient:
        import httpx

        client = self._clients.get(index)
        if client is None:
            transport = httpx.AsyncHTTPTransport(uds=self.me.socket_path(index))
            client = httpx.AsyncClient(transport=transport, base_url="http://worker", timeout=None)
            self._clients[index] = client
        return client

    async def forward(
        self, index: int, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, dict[str, str]]:
        """Send a request to worker ``index``; its status, body (leading heartbeat spaces removed) and headers.

        Raises:
            httpx.HTTPError: the worker could not be reached (it is being replaced).
        """
        sent = {k: v for k, v in headers.items() if k.lower() in _HOP_HEADERS}
        resp = await self._client(index).request(method, path, content=body, headers=sent)
        kept = {k: v for k, v in resp.headers.items() if k.lower() == "retry-after"}
        return resp.status_code, resp.content.lstrip(), kept

    async def gather(self, path: str, headers: dict[str, str], timeout_s: float = 10.0) -> list[bytes | None]:
        """GET ``path?scope=worker`` from every other worker; None for one that did not answer 200."""
        import httpx

        sent = {k: v for k, v in headers.items() if k.lower() == "authorization"}

        async def one(index: int) -> bytes | None:
            try:
                resp = await self._client(index).get(
                    path, params={"scope": WORKER_SCOPE}, headers=sent, timeout=timeout_s
                )
            except httpx.HTTPError:
                return None
            return resp.content if resp.status_code == 200 else None

        others = [i for i in range(self.me.count) if i != self.me.index]
        return list(await asyncio.gather(*(one(i) for i in others)))

    async def gather_json(self, path: str, headers: dict[str, str]) -> list[dict[str, Any] | None]:
        """:meth:`gather`, parsed as JSON objects."""
        out: list[dict[str, Any] | None] = []
        for raw in await self.gather(path, headers):
            try:
                value = json.loads(raw) if raw is not None else None
            except ValueError:
                value = None
            out.append(value if isinstance(value, dict) else None)
        return out

    async def aclose(self) -> None:
        """Close the clients."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
