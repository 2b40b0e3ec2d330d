"""One worker process of ``sandboxkit serve --workers N`` (started by :mod:`.supervisor`, never by hand).

It reads its configuration as one JSON object on stdin (so the token is in neither the process
list nor the environment), takes two descriptors it inherited (its TCP listening socket, shared
port with the other workers through ``SO_REUSEPORT``, and its end of the broker's socket pair),
and serves the same app as a single-process server, on the TCP socket and on its Unix socket
for the other workers (:mod:`.peers`).

It stops like a single-process server on SIGTERM or SIGINT (uvicorn drains open requests, then
the app's lifespan closes the pool and its sandboxes), and also when the supervisor goes away:
the kernel sends SIGTERM when the parent dies (``PR_SET_PDEATHSIG``), and a lost broker
connection ends the server as well.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

__all__ = ["main"]

log = logging.getLogger("sandboxkit.server.worker")

_PR_SET_PDEATHSIG = 1


def main() -> None:
    """Serve as the worker the JSON on stdin describes."""
    config: dict[str, Any] = json.loads(sys.stdin.read())
    _die_with_parent(config["supervisor_pid"])
    logging.basicConfig(
        level=config["log_level"].upper(),
        format=f"%(asctime)s %(levelname)s worker-{config['index']} %(name)s: %(message)s",
    )
    _serve(config)


def _serve(config: dict[str, Any]) -> None:
    import uvicorn

    from sandboxkit.models import Limits
    from sandboxkit.server.app import create_app
    from sandboxkit.server.broker import BrokerLink
    from sandboxkit.server.ceilings import Ceilings
    from sandboxkit.server.connections import guarded_http_protocol
    from sandboxkit.server.peers import WorkerIdentity

    link = BrokerLink()
    me = WorkerIdentity(
        index=config["index"],
        count=config["count"],
        run_dir=config["run_dir"],
        session_key=bytes.fromhex(config["session_key"]),
        link=link,
    )
    kwargs = dict(config["app"])
    kwargs["limits"] = Limits.model_validate(kwargs["limits"])
    kwargs["ceilings"] = Ceilings(**kwargs["ceilings"])
    app = create_app(config["backend"], **kwargs, worker=me)
    listener = socket.socket(fileno=config["listen_fd"])
    broker = socket.socket(fileno=config["broker_fd"])
    peer_socket = _unix_listener(me.socket_path(me.index))
    server_config = uvicorn.Config(
        app,
        log_level=config["log_level"].lower(),
        access_log=config["access_log"],
        loop=config["loop"],
        http=guarded_http_protocol(config["http"], config["head_timeout_s"]),
        timeout_keep_alive=30,
        backlog=4096,
        log_config=None,
    )

    class WorkerServer(uvicorn.Server):  # type: ignore[misc]
        """Connects to the broker before serving, and tells the supervisor once it serves."""

        async def startup(self, sockets: Any = None) -> None:
            if config["replacement"] and config["backend"] == "subprocess":
                # What the killed worker's sandboxes left (workspaces, mounts, cgroups): its owner
                # is gone, so the backend's cleanup takes it; live workers' sandboxes are spared.
                with contextlib.suppress(Exception):
                    removed = await app.state.pool.backend.cleanup()
                    if removed:
                        log.warning("removed %d sandboxes left by the worker this one replaces", removed)
            await link.connect(broker)  # after the cleanup: a connected worker has nothing of its predecessor left
            link.on_lost = self._broker_lost
            await super().startup(sockets=sockets)
            if not self.should_exit:
                link.ready()

        def _broker_lost(self) -> None:
            if not self.should_exit:
                log.warning("the supervisor is gone: stopping")
                self.should_exit = True

    WorkerServer(server_config).run(sockets=[listener, peer_socket])


def _unix_listener(path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # the socket of the worker this one replaces
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(1024)
    return sock


def _die_with_parent(supervisor_pid: int) -> None:
    """SIGTERM (a graceful stop) when the supervisor dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor_pid:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main()
