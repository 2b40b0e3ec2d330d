"""``sandboxkit serve --workers N``: N worker processes behind one port, one run cap and one admission.

Why processes: one server process is one event loop on one core, and a ``/run_code`` request
costs the host about a millisecond of Python (HTTP, validation, the pool), so one process tops
out near 1,000 requests per second however many cores the sandboxes could use (issue 30).

How (the supervisor is this module, in the process ``sandboxkit serve`` started):

* **one port**: the supervisor binds N TCP sockets to the same address with ``SO_REUSEPORT``
  and hands worker *i* socket *i*; the kernel spreads new connections over them. The supervisor
  keeps every socket open, so connections queued on a dead worker's socket wait for its
  replacement instead of being refused;
* **one cap, one admission**: the supervisor holds the broker (:mod:`.broker`): ``-j`` runs in
  flight across all workers, FIFO across workers, and ``--max-queue`` / ``--max-queue-mb``
  for the whole server. A worker that dies gives back everything it held when its socket closes;
* **kept sessions** live in the worker that opened them; their ids name it, and a request that
  reaches another worker is forwarded to it (:mod:`.peers`);
* **a killed worker is replaced** with the same number, socket and session key. What it was
  answering is lost with its process: those clients see the connection close (never an answer
  it did not compute), and clients retry it as a transport error. Its sandboxes die with it
  (``PR_SET_PDEATHSIG``) and the replacement removes what they left (subprocess backend);
* **SIGTERM or SIGINT drains**: each worker stops accepting, finishes what it holds, closes its
  sandboxes; then the supervisor removes its run directory and exits. A second signal stops the
  workers without waiting for open requests (their sandboxes are still closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandboxkit.server.broker import BrokerServer, SlotBook

__all__ = ["WorkersConfig", "default_workers", "serve_workers"]

log = logging.getLogger("sandboxkit.server.supervisor")

#: A worker that dies this soon after it started, this many times in a row, stops the server.
_CRASH_WINDOW_S = 10.0
_CRASH_LOOP = 5


def default_workers() -> int:
    """``--workers`` by default: half the cores this process may use, at least 1 and at most 32.

    Half, because each run's sandbox needs a core too: on 16 cores, 8 host workers feed the
    sandboxes of the other 8. On 2 cores this is 1, a single process, as before ``--workers``.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(32, cores // 2))


@dataclass
class WorkersConfig:
    """What every worker needs; JSON-able (it travels on the worker's stdin).

    Attributes:
        workers: how many worker processes.
        host, port: where to listen (``port`` 0: a free port, the same for every worker).
        backend: the backend's name.
        app: :func:`~sandboxkit.server.app.create_app` keyword arguments (limits and ceilings as dicts).
        max_concurrency, max_requests, max_bytes: the broker's bounds (the whole server's).
        loop, http, head_timeout_s, log_level, access_log: uvicorn's settings, as for one process.
    """

    workers: int
    host: str
    port: int
    backend: str
    app: dict[str, Any]
    max_concurrency: int
    max_requests: int
    max_bytes: int
    loop: str = "auto"
    http: str = "auto"
    head_timeout_s: float = 30.0
    log_level: str = "info"
    access_log: bool = False


def serve_workers(config: WorkersConfig, announce: Callable[[list[str]], None]) -> int:
    """Run the supervisor until SIGTERM/SIGINT; returns the process exit status.

    Raises:
        OSError: the address cannot be bound.
    """
    return asyncio.run(_Supervisor(config, announce).run())


@dataclass
class _Worker:
    index: int
    listener: socket.socket
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    quick_deaths: int = 0
    generation: int = 0


class _Supervisor:
    def __init__(self, config: WorkersConfig, announce: Callable[[list[str]], None]) -> None:
        self.config = config
        self.announce = announce
        book = SlotBook(config.max_concurrency, config.max_requests, config.max_bytes, config.app["max_sessions"])
        self.broker = BrokerServer(book)
        self.broker.on_ready = self._ready
        self.session_key = secrets.token_bytes(32)
        self.run_dir = _private_dir()
        self.workers: list[_Worker] = []
        self.stopping = asyncio.Event()
        self.all_ready = asyncio.Event()
        self.not_ready: set[int] = set()
        self.failed: str | None = None

    async def run(self) -> int:
        try:
            listeners = _bind(self.config.host, self.config.port, self.config.workers)
            self.workers = [_Worker(i, sock) for i, sock in enumerate(listeners)]
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
            self.not_ready = set(range(len(self.workers)))
            watchers = [asyncio.ensure_future(self._keep(worker)) for worker in self.workers]
            ready = asyncio.ensure_future(self.all_ready.wait())
            stop = asyncio.ensure_future(self.stopping.wait())
            await asyncio.wait({ready, stop}, return_when=asyncio.FIRST_COMPLETED)
            if self.all_ready.is_set() and not self.stopping.is_set():
                host, port = listeners[0].getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                self.announce([f"http://{shown}:{port}"])
                log.info(
                    "serving with %d workers, -j %d in all; their sockets are in %s",
                    len(self.workers),
                    self.config.max_concurrency,
                    self.run_dir,
                )
            await stop
            log.info("stopping: draining %d workers", len(self.workers))
            for worker in self.workers:
                _signal(worker.proc, signal.SIGTERM)
            await asyncio.gather(*watchers)
            ready.cancel()
            await self._remove_leftovers()
        finally:
            for worker in self.workers:
                worker.listener.close()
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.failed is not None:
            print(f"error: {self.failed}", file=sys.stderr)
            return 1
        return 0

    def _on_signal(self) -> None:
        """Drain on the first SIGTERM/SIGINT; stop now on a second one.

        Stopping now is uvicorn's second SIGINT: a worker no longer waits for open requests, and
        still closes its sandboxes.
        """
        if not self.stopping.is_set():
            self.stopping.set()
            return
        log.warning("stopping now: open requests are dropped")
        for worker in self.workers:
            _signal(worker.proc, signal.SIGINT)

    async def _remove_leftovers(self) -> None:
        """What workers that stopped without closing their sandboxes left (a second signal, a crash).

        Only the subprocess backend's cleanup spares the sandboxes of live owners; for the others
        a worker's own shutdown is all there is.
        """
        if self.config.backend != "subprocess":
            return
        from sandboxkit.registry import backend as make_backend

        try:
            backend = make_backend(self.config.backend, **dict(self.config.app.get("backend_options") or {}))
            removed = await backend.cleanup()
            await backend.aclose()
        except Exception:  # the workers' own shutdown already closed what it could
            log.exception("removing what the workers left failed")
            return
        if removed:
            log.warning("removed %d sandboxes the workers left behind", removed)

    def _ready(self, key: int) -> None:
        self.not_ready.discard(key % len(self.workers))
        if not self.not_ready:
            self.all_ready.set()

    async def _keep(self, worker: _Worker) -> None:
        """Run worker ``worker`` until the server stops, replacing it whenever it dies."""
        replacement = False
        while not self.stopping.is_set():
            await self._spawn(worker, replacement)
            assert worker.proc is not None
            if self.stopping.is_set():  # the stop came while it started: it missed the signal
                _signal(worker.proc, signal.SIGTERM)
            code = await worker.proc.wait()
            if self.stopping.is_set():
                break
            lived = time.monotonic() - worker.started
            worker.quick_deaths = worker.quick_deaths + 1 if lived < _CRASH_WINDOW_S else 0
            log.error(
                "worker %d (pid %d) died with status %s after %.1fs; replacing it",
                worker.index,
                worker.proc.pid,
                code,
                lived,
            )
            if worker.quick_deaths >= _CRASH_LOOP or not self.all_ready.is_set():
                self.failed = f"worker {worker.index} keeps dying (status {code}); see the log above"
                self.stopping.set()
                for other in self.workers:
                    _signal(other.proc, signal.SIGTERM)
                break
            self.broker.restarts += 1
            replacement = True

    async def _spawn(self, worker: _Worker, replacement: bool) -> None:
        ours, theirs = socket.socketpair()
        # The broker's key is new for each process, so a late end-of-file from a dead worker can
        # never return what its replacement (same index) holds.
        worker.generation += 1
        await self.broker.attach(worker.index + len(self.workers) * worker.generation, ours)
        config = {
            "index": worker.index,
            "count": len(self.workers),
            "run_dir": self.run_dir,
            "session_key": self.session_key.hex(),
            "supervisor_pid": os.getpid(),
            "replacement": replacement,
            "listen_fd": worker.listener.fileno(),
            "broker_fd": theirs.fileno(),
            "backend": self.config.backend,
            "app": self.config.app,
            "loop": self.config.loop,
            "http": self.config.http,
            "head_timeout_s": self.config.head_timeout_s,
            "log_level": self.config.log_level,
            "access_log": self.config.access_log,
        }
        worker.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from sandboxkit.server.worker import main; main()",
            stdin=asyncio.subprocess.PIPE,
            pass_fds=(worker.listener.fileno(), theirs.fileno()),
        )
        worker.started = time.monotonic()
        theirs.close()
        assert worker.proc.stdin is not None
        worker.proc.stdin.write(json.dumps(config).encode())
        await worker.proc.stdin.drain()
        worker.proc.stdin.close()


def _private_dir() -> str:
    """A new directory only this user may enter (0700), short enough for the workers' Unix socket paths."""
    path = tempfile.mkdtemp(prefix="sandboxkit-serve-")
    if len(os.path.join(path, "worker-999.sock").encode()) > 100:  # AF_UNIX paths end at 107 bytes
        os.rmdir(path)
        path = tempfile.mkdtemp(prefix="sandboxkit-serve-", dir="/tmp")
    return path


def _bind(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on one address (``SO_REUSEPORT``); port 0 picks one for all.

    ``SO_REUSEPORT`` would also let this server bind beside another one of the same user already
    on the port (a stale server), and the two would split the connections silently. So the address
    is first bound once without it, which fails (``EADDRINUSE``) while anyone listens there.

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(address)
        address = probe.getsockname()  # port 0: the port every worker's socket takes
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(4096)
            sock.set_inheritable(True)
            address = sock.getsockname()  # the port the first one got
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _signal(proc: asyncio.subprocess.Process | None, sig: int) -> None:
    if proc is not None and proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
