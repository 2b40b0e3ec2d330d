"""A loopback fake of E2B: the control plane and envd (the in-sandbox agent) on one port.

The real ``e2b`` SDK talks to it unmodified with ``api_url=fake.url, sandbox_url=fake.url``
(every sandbox's envd is then reached at the same base URL; the SDK sends the
``E2b-Sandbox-Id`` header, which is how the fake tells sandboxes apart). Implemented (e2b
2.63 wire format):

* control plane: ``POST /v2/sandboxes`` (201), ``GET /v2/sandboxes`` (``metadata`` filter),
  ``DELETE /sandboxes/{id}``, ``POST /sandboxes/{id}/timeout``, ``POST /sandboxes/{id}/pause``
  (204; 409 when already paused) and ``POST /v2/sandboxes/{id}/connect`` (201 resumed, 200
  already running; its ``timeout`` starts the lifetime again);
* envd: ``GET /health``, ``GET/POST /files`` and the Connect process service, served by the
  ``e2b`` package's own generated server stub (``ProcessASGIApplication``) with
  ``Start`` (start / data / end events), ``SendSignal`` and ``List``.

Like the real service, a command whose client went away keeps running, and a sandbox that
is gone answers envd calls with a 502 "... was not found".

Lifetimes, as E2B applies them: a running sandbox is killed once its timeout (set at create,
by ``set_timeout`` and by ``connect``) has passed since it was last set, whatever its client
does; a *paused* sandbox has no timeout (E2B keeps it until it is resumed or killed) and does
not count against the concurrent-sandbox quota. A pause keeps memory: the box's processes are
stopped where they are (SIGSTOP) and go on after ``connect`` (SIGCONT); envd does not answer
while the sandbox is paused (502, like a sandbox that is not running). Faults come from
:meth:`FakeService.inject` (an ``exec`` delay holds the end event back after the process ended).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import signal
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_connect, process_pb
from protobuf import Oneof
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._common import Box, FakeService, drop_connection

ENVD_VERSION = "0.5.7"
#: The API's lifetime of a sandbox created without ``timeout`` (e2b SDK: 300 s).
DEFAULT_TIMEOUT_S = 300


def _error(status: int, message: str, retry_after: float | None = None) -> JSONResponse:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    return JSONResponse({"code": status, "message": message}, status, headers=headers)


def _event(**kw: Any) -> process_pb.StartResponse:
    ((name, value),) = kw.items()
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=Oneof(name, value)))


class _Process(process_connect.Process):
    """The envd process service, running commands as local processes of the sandbox's box."""

    def __init__(self, fake: FakeE2B) -> None:
        self.fake = fake

    def _box(self, ctx: Any) -> Box:
        box = self.fake._running(ctx.request_headers.get("e2b-sandbox-id", ""))
        if box is None:
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found")
        return box

    async def start(self, request: process_pb.StartRequest, ctx: Any) -> AsyncIterator[process_pb.StartResponse]:
        box = self._box(ctx)
        fault = self.fake.faults.take("exec")
        if fault is not None and fault.status:
            raise ConnectError(Code.UNAVAILABLE if fault.status >= 500 else Code.INTERNAL, fault.message)
        cfg = request.process
        assert cfg is not None
        args = [a for a in cfg.args if a != "-l"]  # no login shell: never read this machine's profiles
        self.fake.commands.append(" ".join([cfg.cmd, *args]))
        proc = await box.spawn([cfg.cmd, *args], cwd=cfg.cwd or None, env=dict(cfg.envs))
        yield _event(start=process_pb.ProcessEvent.StartEvent(pid=proc.pid))
        if fault is not None and fault.drop == "during":
            drop_connection()  # envd keeps the process running when its caller goes away
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

        async def pump(stream: asyncio.StreamReader, name: str) -> None:
            while chunk := await stream.read(32768):
                await queue.put((name, chunk))
            await queue.put((name, b""))

        pumps = [asyncio.ensure_future(pump(proc.stdout, "stdout")), asyncio.ensure_future(pump(proc.stderr, "stderr"))]
        open_streams = 2
        # envd ends the stream at the client's deadline (connect-timeout-ms) but, as E2B#500 reports,
        # leaves the process running.
        left_ms = ctx.timeout_ms
        deadline = time.monotonic() + left_ms / 1000 if left_ms is not None else None
        while open_streams:
            try:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                name, chunk = await asyncio.wait_for(queue.get(), remaining)
            except asyncio.TimeoutError:
                raise ConnectError(Code.DEADLINE_EXCEEDED, "the command's stream deadline passed") from None
            if not chunk:
                open_streams -= 1
                continue
            yield _event(data=process_pb.ProcessEvent.DataEvent(output=Oneof(name, chunk)))
        rc = await proc.wait()
        await asyncio.gather(*pumps)
        box.procs.pop(proc.pid, None)
        if fault is not None and fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault is not None and fault.drop == "after":
            drop_connection()
        if self.fake.find(box.id) is None:
            raise ConnectError(Code.UNAVAILABLE, f"The sandbox {box.id} was not found")
        yield _event(end=process_pb.ProcessEvent.EndEvent(exit_code=rc, exited=rc >= 0, status=f"exit status {rc}"))

    async def send_signal(self, request: process_pb.SendSignalRequest, ctx: Any) -> process_pb.SendSignalResponse:
        box = self._box(ctx)
        assert request.process is not None
        pid = request.process.selector.value if request.process.selector else 0
        self.fake.signals.append((box.id, int(pid), int(request.signal)))
        if pid not in box.procs:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        sig = signal.SIGKILL if request.signal == process_pb.Signal.SIGKILL else signal.SIGTERM
        try:
            os.kill(int(pid), sig)
        except ProcessLookupError:
            pass
        return process_pb.SendSignalResponse()

    async def list(self, request: process_pb.ListRequest, ctx: Any) -> process_pb.ListResponse:
        box = self._box(ctx)
        return process_pb.ListResponse(processes=[process_pb.ProcessInfo(pid=p) for p in box.procs])


class FakeE2B(FakeService):
    """In-process fake E2B API + envd. Use ``with FakeE2B() as fake: ... fake.url ...``.

    Attributes:
        quota: the team's concurrent-sandbox limit; more creations answer 429 "you have reached
            the maximum number of concurrent E2B sandboxes (N)" (None = no limit).
        signals: (sandbox id, pid, signal) of every SendSignal received.
        timeouts: (sandbox id, seconds) of every set_timeout received.
    """

    id_prefix = "e2b"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.quota: int | None = None
        self.signals: list[tuple[str, int, int]] = []
        self.timeouts: list[tuple[str, int]] = []
        #: Ids of the sandboxes paused, in order.
        self.pauses: list[str] = []
        #: Snapshot templates: id -> (the source box's files copied at snapshot time, full names).
        self.snapshots: dict[str, tuple[Path, list[str]]] = {}
        self._rpc = process_connect.ProcessASGIApplication(_Process(self))

    def app(self) -> Any:
        rest = Starlette(
            routes=[
                Route("/v2/sandboxes", self._create, methods=["POST"]),
                Route("/v2/sandboxes", self._list, methods=["GET"]),
                Route("/sandboxes/{sid}", self._delete, methods=["DELETE"]),
                Route("/sandboxes/{sid}/timeout", self._timeout, methods=["POST"]),
                Route("/sandboxes/{sid}/pause", self._pause, methods=["POST"]),
                Route("/v2/sandboxes/{sid}/connect", self._connect, methods=["POST"]),
                Route("/sandboxes/{sid}/snapshots", self._snapshot, methods=["POST"]),
                Route("/snapshots", self._list_snapshots, methods=["GET"]),
                Route("/templates/{tid:path}", self._delete_template, methods=["DELETE"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/files", self._read, methods=["GET"]),
                Route("/files", self._write, methods=["POST"]),
            ]
        )
        rpc = self._rpc

        async def dispatch(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/process.Process/"):
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                box_id = headers.get("e2b-sandbox-id", "")
                if self._running(box_id) is None:
                    body = json.dumps({"code": 502, "message": f"The sandbox {box_id} was not found"}).encode()
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 502,
                            "headers": [(b"content-type", b"application/json")],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                    return
                await rpc(scope, receive, send)
                return
            await rest(scope, receive, send)

        return dispatch

    # ------------------------------------------------------------------ control plane

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("x-api-key") == self.api_key

    async def _gate(self, request: Request, route: str) -> Response | None:
        if not self._authorized(request):
            return _error(401, "Invalid API key")
        fault = self.faults.take(route)
        if fault is None:
            return None
        if fault.delay_s and route != "create":
            await asyncio.sleep(fault.delay_s)
        if fault.status:
            self.count_rejection(fault.status)
            return _error(fault.status, fault.message, fault.retry_after)
        if route == "create":
            request.state.create_delay = fault.delay_s
        return None

    async def _create(self, request: Request) -> Response:
        gated = await self._gate(request, "create")
        if gated is not None:
            return gated
        body = await request.json()
        if self.quota is not None and self.running_count >= self.quota:
            # e2b-dev/infra, packages/api/internal/orchestrator/create_instance.go: the team's
            # reservation fails with api.APIError{Code: 429, ClientMsg: ...} (this text).
            self.count_rejection(429)
            message = (
                f"you have reached the maximum number of concurrent E2B sandboxes ({self.quota}). "
                "If you need more, please visit 'https://e2b.dev/docs/billing'"
            )
            return _error(429, message)
        template = body.get("templateID", "base")
        source = self.snapshots.get(template)
        if template != "base" and source is None:
            # e2b-dev/infra: an unknown template (a deleted snapshot) is a 404 at create.
            return _error(404, f"template '{template}' not found")
        box = self.new_box(body.get("metadata") or {})
        box.data.update(body)
        self._set_end(box, body.get("timeout"))
        if source is not None:  # a sandbox from a snapshot starts with the snapshot's files
            shutil.copytree(source[0], box.home, symlinks=True, dirs_exist_ok=True)
        delay = getattr(request.state, "create_delay", 0.0)
        if delay:
            await asyncio.sleep(delay)  # created already; only the answer is late
        return JSONResponse(
            {
                "templateID": body.get("templateID", "base"),
                "sandboxID": box.id,
                "clientID": "fake",
                "envdVersion": ENVD_VERSION,
            },
            201,
        )

    async def _list(self, request: Request) -> Response:
        gated = await self._gate(request, "list")
        if gated is not None:
            return gated
        raw = request.query_params.get("metadata") or ""
        wanted = {urllib.parse.unquote(k): urllib.parse.unquote(v) for k, v in urllib.parse.parse_qsl(raw)}
        with self.ledger.lock:
            boxes = list(self.ledger.live.values())
        now = dt.datetime.now(dt.timezone.utc)
        items = [
            {
                "templateID": b.data.get("templateID", "base"),
                "sandboxID": b.id,
                "clientID": "fake",
                "startedAt": dt.datetime.fromtimestamp(b.created_at, dt.timezone.utc).isoformat(),
                "endAt": dt.datetime.fromtimestamp(b.data["end_at"], dt.timezone.utc).isoformat()
                if b.data["state"] == "running"
                else now.isoformat(),
                "cpuCount": 1,
                "memoryMB": 512,
                "diskSizeMB": 1024,
                "state": b.data["state"],
                "envdVersion": ENVD_VERSION,
                "metadata": b.labels,
            }
            for b in boxes
            if all(b.labels.get(k) == v for k, v in wanted.items())
        ]
        return JSONResponse(items)

    async def _delete(self, request: Request) -> Response:
        gated = await self._gate(request, "delete")
        if gated is not None:
            return gated
        if not self.remove(request.path_params["sid"]):
            return _error(404, f"sandbox {request.path_params['sid']} not found")
        return Response(status_code=204)

    async def _timeout(self, request: Request) -> Response:
        gated = await self._gate(request, "timeout")
        if gated is not None:
            return gated
        box = self.find(request.path_params["sid"])
        if box is None:
            return _error(404, f"sandbox {request.path_params['sid']} not found")
        seconds = int((await request.json())["timeout"])
        self.timeouts.append((box.id, seconds))
        self._set_end(box, seconds)
        return Response(status_code=204)

    async def _pause(self, request: Request) -> Response:
        # e2b SDK sandbox_async/sandbox_api.py _cls_pause: 204 paused, 409 "already paused", 404 unknown.
        gated = await self._gate(request, "pause")
        if gated is not None:
            return gated
        box = self.find(request.path_params["sid"])
        if box is None:
            return _error(404, f"sandbox {request.path_params['sid']} not found")
        if box.data["state"] == "paused":
            return _error(409, f"sandbox {box.id} is already paused")
        box.freeze()
        box.data["state"] = "paused"
        self.pauses.append(box.id)
        return Response(status_code=204)

    async def _connect(self, request: Request) -> Response:
        # e2b SDK api/client/api/sandboxes/post_v_2_sandboxes_sandbox_id_connect.py: 201 resumed,
        # 200 already running -> Sandbox; the body's ``timeout`` is the lifetime from now.
        gated = await self._gate(request, "connect")
        if gated is not None:
            return gated
        box = self.find(request.path_params["sid"])
        if box is None:
            return _error(404, f"Paused sandbox {request.path_params['sid']} not found")
        body = await request.json() if await request.body() else {}
        resumed = box.data["state"] == "paused"
        if resumed:
            if self.quota is not None and self.running_count >= self.quota:
                self.count_rejection(429)
                return _error(429, f"you have reached the maximum number of concurrent E2B sandboxes ({self.quota})")
            self._set_end(box, body.get("timeout"))  # before it runs: the expiry thread reads both
            box.data["state"] = "running"
            box.thaw()
        elif body.get("timeout") is not None:  # a running sandbox's timeout only ever grows on connect
            box.data["end_at"] = max(box.data["end_at"], time.time() + int(body["timeout"]))
        answer = {"templateID": box.data.get("templateID", "base"), "sandboxID": box.id, "clientID": "fake"}
        return JSONResponse({**answer, "envdVersion": ENVD_VERSION}, 201 if resumed else 200)

    # ------------------------------------------------------------------ lifetimes

    def new_box(self, labels: dict[str, str]) -> Box:
        box = super().new_box(labels)
        box.data.update(state="running", end_at=time.time() + DEFAULT_TIMEOUT_S)
        return box

    @staticmethod
    def _set_end(box: Box, seconds: int | None) -> None:
        box.data["end_at"] = time.time() + (int(seconds) if seconds is not None else DEFAULT_TIMEOUT_S)

    def _running(self, box_id: str) -> Box | None:
        box = self.find(box_id)
        return box if box is not None and box.data.get("state") == "running" else None

    @property
    def running_count(self) -> int:
        with self.ledger.lock:
            return sum(b.data.get("state") == "running" for b in self.ledger.live.values())

    def expire(self, now: float) -> None:
        """Kill running sandboxes whose timeout passed (E2B's orchestrator does; paused ones have none)."""
        with self.ledger.lock:
            due = [
                b.id for b in self.ledger.live.values() if b.data.get("state") == "running" and b.data["end_at"] <= now
            ]
        for box_id in due:
            self.expire_box(box_id)

    async def _snapshot(self, request: Request) -> Response:
        # e2b SDK api/client/api/sandboxes/post_sandboxes_sandbox_id_snapshots.py: 201 -> SnapshotInfo
        # {"snapshotID", "names"}; 404 for an unknown sandbox. The fake copies files (no memory).
        gated = await self._gate(request, "snapshot")
        if gated is not None:
            return gated
        box = self.find(request.path_params["sid"])
        if box is None:
            return _error(404, f"sandbox {request.path_params['sid']} not found")
        body = await request.json() if await request.body() else {}
        name = body.get("name") or f"snap-{uuid.uuid4().hex[:12]}"
        snapshot_id = f"fake-team/{name}:default"
        copy = self._snapshot_dir / uuid.uuid4().hex
        shutil.copytree(box.home, copy, symlinks=True)
        self.snapshots[snapshot_id] = (copy, [snapshot_id])
        return JSONResponse({"snapshotID": snapshot_id, "names": [snapshot_id]}, 201)

    async def _list_snapshots(self, request: Request) -> Response:
        gated = await self._gate(request, "list")
        if gated is not None:
            return gated
        items = [{"snapshotID": sid, "names": names} for sid, (_, names) in list(self.snapshots.items())]
        return JSONResponse(items)

    async def _delete_template(self, request: Request) -> Response:
        # e2b SDK api/client/api/templates/delete_templates_template_id.py: 204, or 404 when unknown.
        gated = await self._gate(request, "delete")
        if gated is not None:
            return gated
        entry = self.snapshots.pop(urllib.parse.unquote(request.path_params["tid"]), None)
        if entry is None:
            return _error(404, f"template {request.path_params['tid']} not found")
        shutil.rmtree(entry[0], ignore_errors=True)
        return Response(status_code=204)

    @property
    def _snapshot_dir(self) -> Path:
        path = self._tmp / "snapshots"
        path.mkdir(exist_ok=True)
        return path

    # ------------------------------------------------------------------ envd

    def _envd_box(self, request: Request) -> Box | Response:
        box_id = request.headers.get("e2b-sandbox-id", "")
        box = self._running(box_id)
        if box is None:
            return _error(502, f"The sandbox {box_id} was not found")
        return box

    async def _health(self, request: Request) -> Response:
        box = self._envd_box(request)
        return box if isinstance(box, Response) else Response(status_code=204)

    async def _read(self, request: Request) -> Response:
        fault = self.faults.take("download")
        if fault is not None and fault.status:
            return _error(fault.status, fault.message)
        box = self._envd_box(request)
        if isinstance(box, Response):
            return box
        path = request.query_params["path"]
        try:
            return Response(box.path(path).read_bytes(), media_type="application/octet-stream")
        except (OSError, PermissionError):
            return _error(404, f"path '{path}' does not exist")

    async def _write(self, request: Request) -> Response:
        fault = self.faults.take("upload")
        if fault is not None and fault.status:
            return _error(fault.status, fault.message)
        box = self._envd_box(request)
        if isinstance(box, Response):
            return box
        form = await request.form()
        single = request.query_params.get("path")
        written = []
        for _, value in form.multi_items():
            dest = single or getattr(value, "filename", None)
            assert dest, "upload part without a path"
            target = box.path(dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(await value.read())  # type: ignore[union-attr]
            written.append({"name": target.name, "type": "file", "path": str(target)})
        await form.close()
        return JSONResponse(written)
