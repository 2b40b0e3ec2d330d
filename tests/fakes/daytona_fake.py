"""A loopback fake of Daytona: the control plane (``/api/sandbox``) and the toolbox routes.

The real ``daytona`` SDK talks to it unmodified (``DaytonaConfig(api_url=fake.url + "/api")``):
sandboxes come back ``started`` with ``toolboxProxyUrl = <fake>/toolbox``, so toolbox calls
arrive as ``/toolbox/<sandbox id>/...``. Implemented (daytona 0.226 wire format):

* ``POST/GET/DELETE /api/sandbox[/{id}]`` - create (labels, networkBlockAll, autoStopInterval
  ... are stored), list (``labels`` JSON filter), get, delete;
* ``POST /process/session``, ``POST /process/session/{sid}/exec`` (commands of one session run
  one after another, like the daemon's session shell; their output is *line-labelled* as the
  daemon does it, see :func:`daemon_session_output`), ``DELETE /process/session/{sid}``;
* ``POST /process/execute`` (merged output, server-side timeout kills the process group);
* ``POST /files/bulk-upload`` (multipart), ``POST /files/bulk-download`` (multipart answer,
  a per-file ``error`` part for a missing file); ``GET /user-home-dir``.

* ``POST /api/sandbox/{id}/stop`` and ``/start`` (a stop kills every process of the sandbox,
  its files stay; an ephemeral sandbox, ``autoDeleteInterval`` 0, is deleted as it stops),
  ``/autostop/{minutes}``, ``/autodelete/{minutes}`` and ``/last-activity``.

Lifetimes, as Daytona applies them: a started sandbox with no activity (a toolbox call or
``refresh_activity``) for ``autoStopInterval`` minutes is stopped (0: never); a stopped one is
deleted once ``autoDeleteInterval`` minutes passed since it stopped and since its last
activity (negative: never). A minute is 60 s here too. A stopped sandbox answers toolbox
calls with 400 "sandbox is not started" and uses none of the vCPU quota.

A vanished sandbox answers 404 everywhere, like the real proxy. Faults come from
:meth:`FakeService.inject`. Limits of the service, each answered as the real API does:

* ``quota``: the organisation's vCPU quota. The API (daytonaio/daytona v0.190.0,
  ``apps/api/src/sandbox/services/sandbox.service.ts``, ``validateOrganizationQuotas``) refuses
  a create that would pass it with ``ForbiddenException("Total CPU limit exceeded. Maximum
  allowed: N.\n" + UPGRADE_TIER_MESSAGE)``, serialised by ``apps/api/src/filters/
  all-exceptions.filter.ts`` as ``{path, timestamp, statusCode, error, message}``. Older
  releases threw a BadRequest (400) instead: ``quota_status = 400`` models them. Every sandbox
  uses ``cpu`` vCPUs (1, as Daytona's default snapshot, unless created with resources);
* ``concurrency``: a concurrent-sandbox cap answered 429 "maximum number of concurrent
  sandboxes" (how a self-hosted deployment or a proxy in front of it may refuse);
* ``server_rate``: creations per second, past which the API's throttler answers 429
  "ThrottlerException: Too Many Requests" (``@nestjs/throttler``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import shutil
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._common import Box, FakeService, drop_connection, run_command

#: The daemon's stream labels (libs/common-go/pkg/log/read_multiplex_log.go, STDOUT_PREFIX / STDERR_PREFIX).
STDOUT_PREFIX, STDERR_PREFIX = b"\x01\x01\x01", b"\x02\x02\x02"
#: UPGRADE_TIER_MESSAGE of apps/api/src/common/constants/error-messages.ts, with the fake's dashboard URL.
UPGRADE_TIER = (
    "To increase concurrency limits, upgrade your organization's Tier by visiting https://app.daytona.io/limits."
)
_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests"}


def _error(status: int, message: str, retry_after: float | None = None, path: str = "") -> JSONResponse:
    """An error body as the API's AllExceptionsFilter writes it."""
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    body = {
        "path": path,
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(),
        "statusCode": status,
        "error": _REASONS.get(status, "Error"),
        "message": message,
    }
    return JSONResponse(body, status, headers=headers)


def _label_lines(data: bytes, prefix: bytes) -> bytes:
    """What the daemon's labeller makes of one stream.

    Session commands run under a wrapper (apps/daemon/pkg/session/execute.go, cmdWrapperFormat)
    that reads each stream with ``while IFS= read -r line || [ -n "$line" ]; do printf
    '<prefix>%s\\n' "$line"; done``: every line, the unterminated last one included, is
    written back with a newline, and bash's ``read`` drops NUL bytes.
    """
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the stream ended with a newline: no extra, empty line
    return b"".join(prefix + line.replace(b"\0", b"") + b"\n" for line in lines)


def daemon_session_output(stdout: bytes, stderr: bytes) -> dict[str, str]:
    """The ``output`` / ``stdout`` / ``stderr`` of a session command, as the daemon answers them.

    The labelled lines go to one log; ``DemuxLogBytes`` (execute.go) splits it back by prefix,
    and Go's JSON encoder replaces invalid UTF-8 with U+FFFD. So ``x`` without newline comes
    back ``"x\\n"`` and NUL bytes are lost: why the wrapper sends the program's bytes as base64.
    """
    log = _label_lines(stdout, STDOUT_PREFIX) + _label_lines(stderr, STDERR_PREFIX)
    out = b"".join(chunk for chunk in _demux(log, STDOUT_PREFIX))
    err = b"".join(chunk for chunk in _demux(log, STDERR_PREFIX))
    text = lambda b: b.decode("utf-8", "replace")  # noqa: E731
    return {"output": text(log), "stdout": text(out), "stderr": text(err)}


def _demux(log: bytes, prefix: bytes) -> list[bytes]:
    """The chunks of ``log`` labelled ``prefix`` (each runs to the next label of either stream)."""
    marks = re.compile(re.escape(STDOUT_PREFIX) + b"|" + re.escape(STDERR_PREFIX))
    found = list(marks.finditer(log))
    chunks = []
    for i, m in enumerate(found):
        if m.group(0) == prefix:
            end = found[i + 1].start() if i + 1 < len(found) else len(log)
            chunks.append(log[m.end() : end])
    return chunks


class FakeDaytona(FakeService):
    """In-process fake Daytona API. Use ``with FakeDaytona() as fake: ... fake.url ...``.

    Attributes:
        quota: the organisation's vCPU quota (None = none); a create past it answers
            ``quota_status`` (403; 400 on older releases) "Total CPU limit exceeded".
        quota_status: the status of a quota refusal.
        concurrency: most live sandboxes; more creations answer 429 "maximum number of
            concurrent sandboxes" (None = no cap).
        start_state: state a new sandbox is reported in ("started"; anything else never starts).
        session_deletes: (sandbox id, session id) of every session deleted.
        server_rate: (rate per second, burst) of creations the "service" accepts; faster
            creations answer 429 - what a pool without a creation bucket runs into.
    """

    id_prefix = "dt"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.quota: int | None = None
        self.quota_status = 403
        self.concurrency: int | None = None
        self.start_state = "started"
        self.session_deletes: list[tuple[str, str]] = []
        #: Ids of the sandboxes stopped through the API, and of every ``refresh_activity`` received.
        self.stops: list[str] = []
        self.activities: list[str] = []
        self.server_rate: tuple[float, float] | None = None
        self._tokens = 0.0
        self._last = 0.0
        self._session_locks: dict[tuple[str, str], asyncio.Lock] = {}
        #: Snapshots taken of sandboxes: name -> {"id", "dir" (files copied at snapshot time), "source"}.
        self.snapshots: dict[str, dict[str, Any]] = {}

    @property
    def api_url(self) -> str:
        return self.url + "/api"

    def app(self) -> Starlette:
        t = "/toolbox/{sid}"
        return Starlette(
            routes=[
                Route("/api/sandbox", self._create, methods=["POST"]),
                Route("/api/sandbox", self._list, methods=["GET"]),
                Route("/api/sandbox/{sid}", self._get, methods=["GET"]),
                Route("/api/sandbox/{sid}", self._delete, methods=["DELETE"]),
                Route("/api/sandbox/{sid}/snapshot", self._snapshot, methods=["POST"]),
                Route("/api/sandbox/{sid}/stop", self._stop, methods=["POST"]),
                Route("/api/sandbox/{sid}/start", self._start, methods=["POST"]),
                Route("/api/sandbox/{sid}/autostop/{minutes}", self._set_interval, methods=["POST"]),
                Route("/api/sandbox/{sid}/autodelete/{minutes}", self._set_interval, methods=["POST"]),
                Route("/api/sandbox/{sid}/last-activity", self._last_activity, methods=["POST"]),
                Route("/api/snapshots", self._list_snapshots, methods=["GET"]),
                Route("/api/snapshots/{ref}", self._get_snapshot, methods=["GET"]),
                Route("/api/snapshots/{ref}", self._delete_snapshot, methods=["DELETE"]),
                Route(t + "/user-home-dir", self._home, methods=["GET"]),
                Route(t + "/work-dir", self._home, methods=["GET"]),
                Route(t + "/process/session", self._session_create, methods=["POST"]),
                Route(t + "/process/session/{session}/exec", self._session_exec, methods=["POST"]),
                Route(t + "/process/session/{session}", self._session_delete, methods=["DELETE"]),
                Route(t + "/process/execute", self._execute, methods=["POST"]),
                Route(t + "/files/bulk-upload", self._upload, methods=["POST"]),
                Route(t + "/files/bulk-download", self._download, methods=["POST"]),
            ]
        )

    # ------------------------------------------------------------------ helpers

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.api_key}"

    async def _gate(self, request: Request, route: str) -> Response | None:
        """Auth, then an injected fault (delays other than create's happen here)."""
        if not self._authorized(request):
            return _error(401, "Invalid credentials")
        fault = self.faults.take(route)
        if fault is None:
            return None
        if fault.delay_s and route not in ("create", "exec"):
            await asyncio.sleep(fault.delay_s)
        if fault.status:
            self.count_rejection(fault.status)
            return _error(fault.status, fault.message, fault.retry_after)
        request.state.late_answer = fault.delay_s  # create / exec: the work is done, the answer is late
        request.state.drop = fault.drop
        return None

    def _dto(self, box: Box, state: str | None = None) -> dict[str, Any]:
        d = box.data
        state = state or d.get("state") or "started"
        return {
            "id": box.id,
            "organizationId": "org-fake",
            "name": box.id,
            "user": "daytona",
            "env": d.get("env") or {},
            "labels": box.labels,
            "public": False,
            "networkBlockAll": bool(d.get("networkBlockAll")),
            "kvm": False,
            "target": d.get("target") or "us",
            "cpu": d.get("cpu") or 1,
            "gpu": 0,
            "memory": d.get("memory") or 1,
            "disk": d.get("disk") or 3,
            "state": state,
            "autoStopInterval": d.get("autoStopInterval"),
            "autoDeleteInterval": d.get("autoDeleteInterval"),
            "createdAt": dt.datetime.fromtimestamp(box.created_at, dt.timezone.utc).isoformat(),
            "toolboxProxyUrl": self.url + "/toolbox",
        }

    def _box_or_404(self, request: Request) -> Box | Response:
        box = self.find(request.path_params["sid"])
        if box is None:
            return _error(404, f"Sandbox with ID or name {request.path_params['sid']} not found")
        if request.url.path.startswith("/toolbox/"):
            if box.data.get("state") != "started":
                return _error(400, f"Sandbox {box.id} is not started", path=request.url.path)
            box.data["last_activity"] = time.time()  # the proxy counts toolbox calls as activity
        return box

    def _cpu_in_use(self) -> int:
        with self.ledger.lock:
            return sum(int(b.data.get("cpu") or 1) for b in self.ledger.live.values() if b.data["state"] == "started")

    def _rate_ok(self) -> bool:
        if self.server_rate is None:
            return True
        rate, burst = self.server_rate
        now = time.monotonic()
        self._tokens = burst if not self._last else min(burst, self._tokens + (now - self._last) * rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    # ------------------------------------------------------------------ control plane

    async def _create(self, request: Request) -> Response:
        gated = await self._gate(request, "create")
        if gated is not None:
            return gated
        body = await request.json()
        path = request.url.path
        if not self._rate_ok():
            self.count_rejection(429)
            return _error(429, "ThrottlerException: Too Many Requests", retry_after=1, path=path)
        cpu = int(body.get("cpu") or 1)  # resources come with an image; a snapshot sandbox has 1 vCPU
        if self.quota is not None and self._cpu_in_use() + cpu > self.quota:
            self.count_rejection(self.quota_status)
            message = f"Total CPU limit exceeded. Maximum allowed: {self.quota}.\n{UPGRADE_TIER}"
            return _error(self.quota_status, message, path=path)
        if self.concurrency is not None and self.live_count >= self.concurrency:
            self.count_rejection(429)
            message = f"You have reached the maximum number of concurrent sandboxes ({self.concurrency})"
            return _error(429, message, path=path)
        box = self.new_box(body.get("labels") or {})
        box.data.update({k: v for k, v in body.items() if v is not None}, state=self.start_state)
        if body.get("ephemeral"):  # the SDK sends autoDeleteInterval 0 too; the API does the same
            box.data["autoDeleteInterval"] = 0
        source = self.snapshots.get(str(body.get("snapshot")))
        if source is not None:  # a sandbox from a snapshot taken of a sandbox starts with its files
            shutil.copytree(source["dir"], box.home, symlinks=True, dirs_exist_ok=True)
        delay = getattr(request.state, "late_answer", 0.0)
        if delay:
            await asyncio.sleep(delay)  # the sandbox exists already; only the answer is late
        return JSONResponse(self._dto(box))

    async def _list(self, request: Request) -> Response:
        gated = await self._gate(request, "list")
        if gated is not None:
            return gated
        wanted = json.loads(request.query_params.get("labels") or "{}")
        with self.ledger.lock:
            boxes = list(self.ledger.live.values())
        items = [self._dto(b) for b in boxes if all(b.labels.get(k) == v for k, v in wanted.items())]
        return JSONResponse({"items": items, "nextCursor": None})

    async def _get(self, request: Request) -> Response:
        gated = await self._gate(request, "get")
        if gated is not None:
            return gated
        box = self._box_or_404(request)
        return box if isinstance(box, Response) else JSONResponse(self._dto(box))

    async def _delete(self, request: Request) -> Response:
        gated = await self._gate(request, "delete")
        if gated is not None:
            return gated
        box = self._box_or_404(request)
        if isinstance(box, Response):
            return box
        dto = self._dto(box, state="destroyed")
        self.remove(box.id)
        return JSONResponse(dto)

    # ------------------------------------------------------------------ lifecycle

    def new_box(self, labels: dict[str, str]) -> Box:
        box = super().new_box(labels)
        box.data.update(state="started", last_activity=time.time(), autoStopInterval=15)  # the API's defaults
        return box

    async def _stop(self, request: Request) -> Response:
        gated = await self._gate(request, "stop")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        dto = self._dto(box, state="stopped")
        self._stop_box(box)
        self.stops.append(box.id)
        return JSONResponse(dto)

    def _stop_box(self, box: Box, *, auto: bool = False) -> None:
        """Stop: every process dies, the files stay; an ephemeral sandbox is deleted (``auto``: by the auto-stop)."""
        box.kill_all()
        box.procs.clear()
        box.data.update(state="stopped", stopped_at=time.time())
        if box.data.get("autoDeleteInterval") == 0:
            (self.expire_box if auto else self.remove)(box.id)

    async def _start(self, request: Request) -> Response:
        gated = await self._gate(request, "start")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        if box.data["state"] != "started":
            cpu = int(box.data.get("cpu") or 1)
            if self.quota is not None and self._cpu_in_use() + cpu > self.quota:
                message = f"Total CPU limit exceeded. Maximum allowed: {self.quota}.\n{UPGRADE_TIER}"
                return _error(self.quota_status, message, path=request.url.path)
            box.data.update(state="started", last_activity=time.time())
        return JSONResponse(self._dto(box))

    async def _set_interval(self, request: Request) -> Response:
        gated = await self._gate(request, "lifecycle")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        key = "autoStopInterval" if "/autostop/" in request.url.path else "autoDeleteInterval"
        box.data[key] = int(request.path_params["minutes"])
        return JSONResponse(self._dto(box))

    async def _last_activity(self, request: Request) -> Response:
        gated = await self._gate(request, "activity")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        box.data["last_activity"] = time.time()
        self.activities.append(box.id)
        return Response(status_code=201)

    def expire(self, now: float) -> None:
        """Auto-stop idle started sandboxes and auto-delete stopped ones, as Daytona's lifecycle jobs do."""
        with self.ledger.lock:
            boxes = list(self.ledger.live.values())
        for box in boxes:
            d = box.data
            if d.get("state") == "started":
                minutes = int(d.get("autoStopInterval") or 0)
                if minutes > 0 and now - d["last_activity"] >= minutes * 60:
                    self._stop_box(box, auto=True)
            elif d.get("state") == "stopped":
                minutes = int(d.get("autoDeleteInterval") if d.get("autoDeleteInterval") is not None else -1)
                if minutes >= 0 and now - max(d["stopped_at"], d["last_activity"]) >= minutes * 60:
                    self.expire_box(box.id)

    # ------------------------------------------------------------------ snapshots

    async def _snapshot(self, request: Request) -> Response:
        # daytona_api_client_async SandboxApi.create_sandbox_snapshot: POST /sandbox/{id}/snapshot
        # {"name"} -> the SandboxDto; the SDK then polls the sandbox until it leaves "snapshotting".
        gated = await self._gate(request, "snapshot")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        name = (await request.json())["name"]
        copy = self._tmp / "snapshots" / uuid.uuid4().hex
        copy.parent.mkdir(exist_ok=True)
        shutil.copytree(box.home, copy, symlinks=True)
        self.snapshots[name] = {"id": uuid.uuid4().hex, "dir": copy, "source": box.id}
        return JSONResponse(self._dto(box))

    def _snapshot_dto(self, name: str) -> dict[str, Any]:
        # SnapshotDto's required fields (daytona_api_client_async/models/snapshot_dto.py).
        snap = self.snapshots[name]
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        return {
            "id": snap["id"], "general": False, "name": name, "state": "active", "size": None,
            "entrypoint": None, "cpu": 1, "gpu": 0, "mem": 1, "disk": 3, "errorReason": None,
            "createdAt": now, "updatedAt": now, "lastUsedAt": None, "sourceSandboxId": snap["source"],
        }  # fmt: skip

    def _snapshot_named(self, ref: str) -> str | None:
        return next((n for n, s in self.snapshots.items() if ref in (n, s["id"])), None)

    async def _list_snapshots(self, request: Request) -> Response:
        gated = await self._gate(request, "list")
        if gated is not None:
            return gated
        items = [self._snapshot_dto(n) for n in list(self.snapshots)]
        return JSONResponse({"items": items, "total": len(items), "page": 1, "totalPages": 1})

    async def _get_snapshot(self, request: Request) -> Response:
        name = self._snapshot_named(request.path_params["ref"])
        if name is None:
            return _error(404, f"Snapshot {request.path_params['ref']} not found", path=request.url.path)
        return JSONResponse(self._snapshot_dto(name))

    async def _delete_snapshot(self, request: Request) -> Response:
        gated = await self._gate(request, "delete")
        if gated is not None:
            return gated
        name = self._snapshot_named(request.path_params["ref"])
        if name is None:
            return _error(404, f"Snapshot {request.path_params['ref']} not found", path=request.url.path)
        shutil.rmtree(self.snapshots.pop(name)["dir"], ignore_errors=True)
        return Response(status_code=200)

    # ------------------------------------------------------------------ toolbox

    async def _home(self, request: Request) -> Response:
        gated = await self._gate(request, "info")
        box = gated or self._box_or_404(request)
        return box if isinstance(box, Response) else JSONResponse({"dir": str(box.home)})

    async def _session_create(self, request: Request) -> Response:
        gated = await self._gate(request, "session")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        session = (await request.json())["sessionId"]
        self._session_locks[(box.id, session)] = asyncio.Lock()
        return Response(status_code=201)

    async def _session_delete(self, request: Request) -> Response:
        box = self._box_or_404(request)
        if isinstance(box, Response):
            return box
        self._session_locks.pop((box.id, request.path_params["session"]), None)
        self.session_deletes.append((box.id, request.path_params["session"]))
        return Response(status_code=204)

    async def _session_exec(self, request: Request) -> Response:
        gated = await self._gate(request, "exec")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        lock = self._session_locks.get((box.id, request.path_params["session"]))
        if lock is None:
            return _error(404, "session not found")
        body = await request.json()
        self.commands.append(body["command"])
        drop = getattr(request.state, "drop", None)
        async with lock:  # one shell per session: commands wait for the previous one
            if drop == "during":
                drop_connection()  # the session's shell still runs the command, as the daemon's does
            out, err, rc = await run_command(box, body["command"])
            if drop == "after":
                drop_connection()
            delay = getattr(request.state, "late_answer", 0.0)
            if delay:
                await asyncio.sleep(delay)
        if self.find(box.id) is None:
            return _error(404, f"Sandbox with ID or name {box.id} not found")
        return JSONResponse({"cmdId": uuid.uuid4().hex, **daemon_session_output(out, err), "exitCode": rc})

    async def _execute(self, request: Request) -> Response:
        gated = await self._gate(request, "execute")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        body = await request.json()
        self.commands.append(body["command"])
        proc = await box.spawn(["bash", "-c", body["command"]], cwd=body.get("cwd"), env=body.get("envs"), merge=True)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), body.get("timeout") or 10)
        except asyncio.TimeoutError:
            import os
            import signal

            os.killpg(proc.pid, signal.SIGKILL)
            return _error(408, "command execution timeout")
        return JSONResponse({"exitCode": proc.returncode, "result": out.decode("utf-8", "replace")})

    async def _upload(self, request: Request) -> Response:
        gated = await self._gate(request, "upload")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        form = await request.form()
        paths = {k[: -len(".path")]: str(v) for k, v in form.multi_items() if k.endswith(".path")}
        for key, value in form.multi_items():
            if not key.endswith(".file"):
                continue
            dest = paths.get(key[: -len(".file")]) or getattr(value, "filename", None)
            assert dest, "upload part without a destination"
            target = box.path(dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(await value.read())  # type: ignore[union-attr]
        await form.close()
        return Response(status_code=200)

    async def _download(self, request: Request) -> Response:
        gated = await self._gate(request, "download")
        box = gated or self._box_or_404(request)
        if isinstance(box, Response):
            return box
        paths = (await request.json())["paths"]
        boundary = uuid.uuid4().hex
        chunks: list[bytes] = []
        for p in paths:
            try:
                data = box.path(p).read_bytes()
                part_name, ctype = "file", "application/octet-stream"
            except (OSError, PermissionError):
                data = json.dumps({"message": f"file not found: {p}", "statusCode": 404, "code": "FILE_NOT_FOUND"})
                data, part_name, ctype = data.encode(), "error", "application/json"
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{part_name}"; filename="{p}"\r\n'
                f"Content-Type: {ctype}\r\n\r\n"
            )
            chunks += [head.encode(), data, b"\r\n"]
        chunks.append(f"--{boundary}--\r\n".encode())
        return Response(b"".join(chunks), media_type=f"multipart/form-data; boundary={boundary}")
