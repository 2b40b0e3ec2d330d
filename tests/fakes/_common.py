"""Pieces shared by the loopback fakes of cloud sandbox services.

* :class:`ThreadedServer` serves an ASGI app with uvicorn on 127.0.0.1 (random port) in a
  daemon thread, so a test (or a child process it spawns) talks real HTTP to it.
* :class:`Box` is one fake sandbox: a temp directory standing in for the sandbox user's home,
  and the local processes started "in" it. Every process gets a marker in its environment,
  so the box can find (and kill) all of its descendants by scanning ``/proc`` - even those
  that left its process group - and never touches a process it did not start.
* :class:`Faults` holds injected failures per route (status codes, delays, stalls).
* :class:`Ledger` records what a test asserts on: live sandboxes and their peak, creation
  times, deletions.

The fakes are deliberately simple and bounded: a command runs with ``bash -c`` in the box
directory with a minimal environment, and is killed after ``max_runtime_s`` whatever happens.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from support.procs import interrupt_when_ready as interrupt_when_ready  # the Ctrl-C tests' helper

MARKER = "SANDBOXKIT_FAKE_BOX"
SPAWN_MARKER = "SANDBOXKIT_FAKE_SPAWN"


#: The connection of the request being served, so a fault can drop it (see :func:`drop_connection`).
_TRANSPORT: contextvars.ContextVar[asyncio.BaseTransport | None] = contextvars.ContextVar("transport", default=None)


def _with_transport(app: Any) -> Any:
    """``app`` with the request's connection recorded in :data:`_TRANSPORT`.

    uvicorn's ``send`` is a method of the request cycle, which holds the connection's
    transport; nothing in the ASGI scope reaches it, and nothing else can cut a connection
    mid-request the way a reset or a dying proxy does.
    """

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        _TRANSPORT.set(getattr(getattr(send, "__self__", None), "transport", None))
        await app(scope, receive, send)

    return wrapped


def drop_connection() -> None:
    """Cut the connection of the request being served, without an answer (a reset, as the client sees it)."""
    transport = _TRANSPORT.get()
    if transport is None:
        raise RuntimeError("no connection to drop: the app is not served by ThreadedServer")
    transport.abort()  # type: ignore[attr-defined]


class ThreadedServer:
    """Run an ASGI app on 127.0.0.1:<random port> in a background thread."""

    def __init__(self, app: Any) -> None:
        app = _with_transport(app)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", timeout_keep_alive=30, timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


def _marked_pids(key: str, value: str) -> list[int]:
    """Pids of live processes whose environment has ``key=value`` (our own processes only)."""
    needle = f"{key}={value}".encode() + b"\0"
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env + b"\0" and state != b"Z":
            pids.append(int(entry.name))
    return pids


def _state(pid: int) -> str:
    """The one-letter state of a process (``/proc/PID/stat``), "" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _kill_marked(key: str, value: str, sig: int = signal.SIGKILL) -> None:
    for pid in _marked_pids(key, value):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


class Box:
    """One fake sandbox: a home directory and the processes running in it."""

    def __init__(self, box_id: str, parent: Path, *, max_runtime_s: float) -> None:
        self.id = box_id
        self.home = parent / box_id
        self.home.mkdir(parents=True)
        self.max_runtime_s = max_runtime_s
        self.labels: dict[str, str] = {}
        self.data: dict[str, Any] = {}
        self.created_at = time.time()
        self.procs: dict[int, asyncio.subprocess.Process] = {}

    def path(self, p: str) -> Path:
        """A sandbox path as a local path: relative to the home; absolute ones must be inside it."""
        if p.startswith("/"):
            local = Path(p)
            if self.home != local and self.home not in local.parents:
                local = self.home / p.lstrip("/")
        else:
            local = self.home / p
        resolved = local.resolve()
        if self.home.resolve() not in resolved.parents and resolved != self.home.resolve():
            raise PermissionError(p)
        return resolved

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            MARKER: self.id,
            **(extra or {}),
        }

    async def spawn(
        self, argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None, merge: bool = False
    ) -> Any:
        """Start a process in the box (``merge``: stderr goes to stdout, like Daytona's process.exec)."""
        workdir = self.path(cwd) if cwd else self.home
        spawn_id = uuid.uuid4().hex
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=str(workdir),
            env=self.env({**(env or {}), SPAWN_MARKER: spawn_id}),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge else asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.procs[proc.pid] = proc
        asyncio.get_running_loop().call_later(self.max_runtime_s, _kill_marked, SPAWN_MARKER, spawn_id)
        return proc

    def running(self) -> list[int]:
        """Pids of this box's live processes (descendants included)."""
        return _marked_pids(MARKER, self.id)

    def kill_all(self) -> None:
        """Kill everything started in the box; its files stay (a stopped VM's disk)."""
        for _ in range(3):
            _kill_marked(MARKER, self.id)
            if not self.running():
                break
            time.sleep(0.05)

    def freeze(self) -> None:
        """Stop every process of the box where it is (SIGSTOP): a paused VM's memory, kept but not running.

        Returns once each shows as stopped, as a pause answers once the VM is paused (a signal is
        acted on when its target is next scheduled).
        """
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            _kill_marked(MARKER, self.id, signal.SIGSTOP)  # again: a child forked meanwhile is stopped too
            if all(_state(pid) in ("T", "t", "") for pid in self.running()):
                return
            time.sleep(0.01)

    def thaw(self) -> None:
        """Let the processes :meth:`freeze` stopped run on (SIGCONT), as a VM resumed from its memory."""
        _kill_marked(MARKER, self.id, signal.SIGCONT)

    def destroy(self) -> None:
        """Kill everything started in the box and remove its directory."""
        self.thaw()  # a stopped process dies of SIGKILL too, but its pipes would hold its readers
        self.kill_all()
        shutil.rmtree(self.home, ignore_errors=True)


@dataclass
class Fault:
    status: int | None = None
    delay_s: float = 0.0
    times: int = 1
    retry_after: float | None = None
    message: str = "injected fault"
    #: ``exec`` only: cut the connection "during" the command (it keeps running) or "after" it
    #: ended (its answer is lost); the command runs either way.
    drop: str | None = None


class Faults:
    """Failures to inject, per route name, consumed in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_route: dict[str, list[Fault]] = {}

    def add(self, route: str, fault: Fault) -> None:
        with self._lock:
            self._by_route.setdefault(route, []).append(fault)

    def take(self, route: str) -> Fault | None:
        with self._lock:
            queue = self._by_route.get(route)
            if not queue:
                return None
            fault = queue[0]
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
            return fault

    def clear(self) -> None:
        with self._lock:
            self._by_route.clear()


@dataclass
class Ledger:
    """What happened on the fake, for assertions."""

    live: dict[str, Box] = field(default_factory=dict)
    peak_live: int = 0
    create_times: list[float] = field(default_factory=list)
    created: int = 0
    deleted: int = 0
    vanished: list[str] = field(default_factory=list)
    #: Sandboxes the service removed on its own when their lifetime ran out (timeout, auto-stop/delete).
    expired: list[str] = field(default_factory=list)
    rejected: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeService:
    """Base of the two fakes: boxes, faults, the ledger, the server thread."""

    id_prefix = "sb"

    def __init__(self, *, api_key: str = "test-key", max_runtime_s: float = 60.0) -> None:
        self.api_key = api_key
        self.max_runtime_s = max_runtime_s
        self.faults = Faults()
        self.ledger = Ledger()
        self._tmp = Path(tempfile.mkdtemp(prefix=f"fake-{self.id_prefix}-"))
        self.server: ThreadedServer | None = None
        #: Every command line the fake ran, in order (to prove what was and was not sent).
        self.commands: list[str] = []
        self._reaping = threading.Event()

    # ---- for tests

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def start(self) -> FakeService:
        self.server = ThreadedServer(self.app())
        self.server.start()
        threading.Thread(target=self._reap_expired, name="fake-expiry", daemon=True).start()
        return self

    def stop(self) -> None:
        self._reaping.set()
        if self.server is not None:
            self.server.stop()
        with self.ledger.lock:
            boxes = list(self.ledger.live.values())
            self.ledger.live.clear()
        for box in boxes:
            box.destroy()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> FakeService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(
        self,
        route: str,
        *,
        status: int | None = None,
        delay_s: float = 0.0,
        times: int = 1,
        retry_after: float | None = None,
        message: str = "injected fault",
        drop: str | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``route`` fail with ``status`` and/or take ``delay_s`` longer.

        Routes: ``create``, ``delete``, ``list``, ``get`` (control plane) and ``exec``, ``upload``,
        ``download`` (in the sandbox). A ``create`` delay happens *after* the sandbox exists, as
        when the API is slow to answer a creation it has already made. ``drop`` (``exec``
        only): the connection is cut ``"during"`` the command, which keeps running, or
        ``"after"`` it ended, so the client never gets its answer.
        """
        if drop not in (None, "during", "after"):
            raise ValueError(f"drop must be 'during' or 'after', got {drop!r}")
        self.faults.add(route, Fault(status, delay_s, times, retry_after, message, drop))

    @property
    def live_count(self) -> int:
        with self.ledger.lock:
            return len(self.ledger.live)

    def live_ids(self) -> list[str]:
        with self.ledger.lock:
            return list(self.ledger.live)

    def box(self, box_id: str) -> Box:
        with self.ledger.lock:
            return self.ledger.live[box_id]

    def vanish(self, box_id: str) -> None:
        """Delete a sandbox behind the client's back (as when the service loses it)."""
        with self.ledger.lock:
            box = self.ledger.live.pop(box_id)
            self.ledger.vanished.append(box_id)
        box.destroy()

    def running_processes(self, box_id: str | None = None) -> list[int]:
        """Live processes of one box (or of all live boxes)."""
        with self.ledger.lock:
            boxes = [self.ledger.live[box_id]] if box_id else list(self.ledger.live.values())
        return [pid for b in boxes for pid in b.running()]

    # ---- for subclasses

    def app(self) -> Any:
        raise NotImplementedError

    def expire(self, now: float) -> None:
        """Apply the service's own lifetimes at wall time ``now`` (timeouts, auto-stop); called every 0.1 s."""

    def _reap_expired(self) -> None:
        while not self._reaping.wait(0.1):
            self.expire(time.time())

    def new_box(self, labels: dict[str, str]) -> Box:
        box = Box(f"{self.id_prefix}-{uuid.uuid4().hex[:12]}", self._tmp, max_runtime_s=self.max_runtime_s)
        box.labels = dict(labels)
        with self.ledger.lock:
            self.ledger.live[box.id] = box
            self.ledger.created += 1
            self.ledger.create_times.append(time.monotonic())
            self.ledger.peak_live = max(self.ledger.peak_live, len(self.ledger.live))
        return box

    def find(self, box_id: str) -> Box | None:
        with self.ledger.lock:
            return self.ledger.live.get(box_id)

    def remove(self, box_id: str) -> bool:
        with self.ledger.lock:
            box = self.ledger.live.pop(box_id, None)
            if box is not None:
                self.ledger.deleted += 1
        if box is None:
            return False
        box.destroy()
        return True

    def expire_box(self, box_id: str) -> None:
        """Remove a sandbox whose lifetime ran out, as the service's own reaper does."""
        with self.ledger.lock:
            box = self.ledger.live.pop(box_id, None)
            if box is None:
                return
            self.ledger.deleted += 1
            self.ledger.expired.append(box_id)  # with the pop: a test never sees one gone but not recorded
        box.destroy()

    def count_rejection(self, status: int) -> None:
        with self.ledger.lock:
            self.ledger.rejected[status] = self.ledger.rejected.get(status, 0) + 1


def wait_until(predicate: Any, timeout_s: float = 10.0) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passes (for tests)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


async def run_command(
    box: Box, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None
) -> tuple[bytes, bytes, int]:
    """Run ``bash -c command`` in ``box`` and return (stdout, stderr, exit code).

    Like the real services, the process is *not* killed if the caller goes away.
    """
    proc = await box.spawn(["bash", "-c", command], cwd=cwd, env=env)
    out, err = await asyncio.shield(proc.communicate())
    box.procs.pop(proc.pid, None)
    return out, err, proc.returncode if proc.returncode is not None else -1
