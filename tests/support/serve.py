"""Start ``sandboxkit serve`` as a real subprocess on a free loopback port, and stop it cleanly.

Shared by tests/server, tests/backends/sandbox_fusion and tests/conformance (``support.serve``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from support.procs import pids, proc_stat

#: The ``app_client`` fixture: ``async with app_client(backend, **create_app_kwargs) as client``.
AppClient = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]

_LISTENING = re.compile(r"sandboxkit serve: listening on (http://127\.0\.0\.1:\d+)")


class ServeProcess:
    """``sandboxkit serve --port 0 ARGS...``; ``url`` is its base URL once :meth:`start` returns."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = ["serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "info", *args]
        self.env = env
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.leftover = False
        self._log = tempfile.NamedTemporaryFile(prefix="sandboxkit-serve-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def run_code_url(self) -> str:
        return f"{self.url}/run_code"

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def start(self, timeout: float = 60.0) -> ServeProcess:
        cmd = [sys.executable, "-c", "from sandboxkit.cli import main; main()", *self.args]
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self.env or {})},
            start_new_session=True,  # its own process group, so stop() can reach every child
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.log())
            if match:
                self.url = match.group(1)
                if httpx.get(f"{self.url}/v1/ping", timeout=5).json() == "pong":
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandboxkit serve exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"sandboxkit serve did not start within {timeout}s:\n{self.log()}")

    def stop(self) -> int | None:
        """SIGTERM (graceful: the pool closes its sandboxes), then SIGKILL the group if needed."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # Anything still running in its group (a leaked sandbox process) is ours to end, and a leak.
        # Zombies are not: bwrap's probes leave an orphan that ends at once and waits for the
        # machine's init to collect it, which may take a moment.
        live = _live_in_group(proc.pid)
        if live:
            self.leftover = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._log.close()
        return proc.returncode

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        os.unlink(self._log.name)


def _live_in_group(pgid: int) -> list[int]:
    """Pids of the processes of group ``pgid`` that are not zombies."""
    return [pid for pid in pids() if (st := proc_stat(pid)) is not None and st.pgrp == pgid and st.state != "Z"]


@contextmanager
def uvicorn_thread(app: Any) -> Iterator[str]:
    """The app on a real loopback socket, in a thread (so tests can time what clients see)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
