"""The ``daytona`` backend: Daytona cloud sandboxes through the ``daytona`` SDK (``AsyncDaytona``).

What this module adds to the SDK is discipline:

* every sandbox carries the sandboxkit labels (see :mod:`sandboxkit.backends._cloud_backend`,
  which also runs the create-or-reap ladder), is ephemeral (deleted when it stops) and
  auto-stops when idle, so a crashed trainer's sandboxes disappear on their own and
  ``cleanup()`` can find the rest; a create that timed out is also found by the id the SDK
  attaches to its timeout error;
* ``AsyncDaytona`` binds its aiohttp session to the event loop that first used it, so the
  backend keeps one client per loop and re-attaches a sandbox to the calling loop's client;
* ``process.exec`` merges stdout and stderr, so programs run as *session commands*; the daemon
  line-labels session output (a newline added to an unterminated line, NUL bytes dropped), so
  the program's bytes come back base64-encoded by the wrapper (:mod:`sandboxkit.backends._wrapper`);
  our own short commands (kill, reset) use ``process.exec``;
* a session command that outlives the host deadline leaves its shell busy, so the session
  is deleted and the process group killed (see :mod:`sandboxkit.backends._cloud_sandbox`);
* SDK errors become sandboxkit errors: the organisation quota ("Total CPU limit exceeded.
  Maximum allowed: N.", 403, or 400 on older releases) and "maximum number of concurrent
  sandboxes" → CapacityExceeded (``limit`` = N), other 429s → RateLimited, 5xx / timeouts /
  connection → Transient, 404 on a sandbox in use → SandboxCrashed, 401/403 →
  BackendUnavailable.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from sandboxkit.backends._cloud_backend import CloudBackend, named_limit
from sandboxkit.backends._cloud_sandbox import CloudSandbox, NoAnswer, RawResult, redact
from sandboxkit.configs import DaytonaConfig
from sandboxkit.errors import (
    BackendUnavailable,
    CapacityExceeded,
    InvalidRequest,
    RateLimited,
    SandboxCrashed,
    SandboxkitError,
    Transient,
)
from sandboxkit.models import Limits

if TYPE_CHECKING:
    import httpx
    from daytona import AsyncDaytona
    from daytona._async.sandbox import AsyncSandbox as SdkSandbox

__all__ = ["DaytonaBackend", "DaytonaSandbox", "map_error"]

log = logging.getLogger(__name__)
DEFAULT_API_URL = "https://app.daytona.io/api"

# The API's organisation quota answers (apps/api/src/sandbox/services/sandbox.service.ts,
# validateOrganizationQuotas: "Total CPU|memory|disk limit exceeded. Maximum allowed: N.",
# ForbiddenException since ~v0.150, BadRequest before) and a concurrent-sandbox limit.
_QUOTA = re.compile(
    r"total\s+(?:cpu|memory|disk|gpu)\s+limit\s+exceeded|maximum number of concurrent|concurrent sandbox(?:es)? limit",
    re.IGNORECASE,
)


def _retry_after(headers: Mapping[str, Any] | None) -> float | None:
    for key, value in (headers or {}).items():
        if str(key).lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status behind an SDK error, looking through ``__cause__`` (some paths drop it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for attr in ("status_code", "status"):
            value = getattr(current, attr, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
        current = current.__cause__ or current.__context__
    return None


def map_error(
    exc: BaseException, *, op: str, sandbox_id: str | None = None, secret: str | None = None
) -> SandboxkitError:
    """Translate a Daytona SDK / transport error into the sandboxkit error tree.

    Args:
        exc: what the SDK raised.
        op: what we were doing ("create", "exec", "upload"...), for the message.
        sandbox_id: the sandbox in use; a 404 then means the sandbox vanished.
        secret: the API key, redacted from the message should the SDK ever echo it.
    """
    from daytona import (
        DaytonaAuthenticationError,
        DaytonaBadRequestError,
        DaytonaForbiddenError,
        DaytonaNotFoundError,
        DaytonaRateLimitError,
    )

    status = _status_of(exc)
    detail = redact(f"{type(exc).__name__}: {exc}", secret)
    where: dict[str, Any] = {"backend": "daytona", "sandbox_id": sandbox_id}
    # A quota refusal comes as 403 (400 on older releases, 429 for a concurrency cap): read the
    # body before the status, or an organisation at its vCPU quota looks like a bad API key.
    if status in (400, 403, 429, None) and _QUOTA.search(str(exc)):
        limit = named_limit(str(exc))
        return CapacityExceeded(
            f"Daytona refused to {op}: the organisation is at its quota ({detail}); the pool lowers its "
            "sandbox cap and waits for one of its sandboxes to close. To run more at once, raise the quota "
            "(Daytona dashboard, Limits), use a snapshot or image with fewer vCPUs, or set max_sandboxes "
            f"to {int(limit) if limit else 'the quota'} or less",
            retry_after=_retry_after(getattr(exc, "headers", None)),
            limit=limit,
            **where,
        )
    if isinstance(exc, DaytonaRateLimitError) or status == 429:
        return RateLimited(
            f"Daytona refused to {op} for now (429: {detail}); the pool backs off and retries, "
            "lower creation_rate / max_sandboxes if this persists",
            retry_after=_retry_after(getattr(exc, "headers", None)),
            **where,
        )
    if isinstance(exc, (DaytonaAuthenticationError, DaytonaForbiddenError)) or status in (401, 403):
        return BackendUnavailable(
            f"Daytona rejected the credentials during {op} ({detail}); check DAYTONA_API_KEY and DAYTONA_API_URL",
            **where,
        )
    if isinstance(exc, DaytonaNotFoundError) or status in (404, 410):
        if sandbox_id is not None:
            return SandboxCrashed(
                f"the sandbox vanished during {op} ({detail}); it is discarded and a fresh one is used next", **where
            )
        return BackendUnavailable(f"Daytona answered 404 to {op} ({detail}); check DAYTONA_API_URL", **where)
    if (isinstance(exc, DaytonaBadRequestError) or status in (400, 422)) and op == "create":
        return InvalidRequest(f"Daytona rejected the sandbox parameters ({detail}); fix the backend options", **where)
    return Transient(f"Daytona {op} failed ({detail}); retrying on a fresh sandbox may help", **where)


class DaytonaSandbox(CloudSandbox):
    """One Daytona sandbox. Use it through :class:`~sandboxkit.pool.SandboxPool`."""

    _backend: DaytonaBackend

    def __init__(self, backend: DaytonaBackend, sdk: SdkSandbox, limits: Limits, root: str) -> None:
        super().__init__(backend, sandbox_id=str(sdk.id), limits=limits)
        self._sdk = sdk
        self._sdk_loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        self._session: str | None = None
        self.root = root
        #: Stopped by :meth:`suspend`; Daytona answers no toolbox call until :meth:`resume`.
        self.stopped = False

    async def _bound(self) -> SdkSandbox:
        """The SDK sandbox object usable on the *calling* loop (AsyncDaytona is loop-bound)."""
        loop = asyncio.get_running_loop()
        if self._sdk_loop is not loop:
            self._sdk = await self._backend._client().get(self.id)
            self._sdk_loop = loop
            self._session = None  # sessions are per sandbox, but re-create rather than trust an old id
        return self._sdk

    async def _take_snapshot(self, name: str) -> str:
        """The sandbox's filesystem, with Daytona's snapshot API (``sandbox.create_snapshot``); its id is its name."""
        sdk = await self._bound()
        await sdk.create_snapshot(name, timeout=self._backend.create_timeout_s)
        return name

    async def _upload(self, files: Mapping[str, bytes]) -> None:
        from daytona import FileUpload

        sdk = await self._bound()
        try:
            await sdk.fs.upload_files([FileUpload(source=data, destination=path) for path, data in files.items()])
        except Exception as exc:
            raise await self._fail(exc, "upload files") from exc

    async def _download(self, paths: Sequence[str]) -> dict[str, bytes]:
        from daytona import FileDownloadRequest

        sdk = await self._bound()
        try:
            results = await sdk.fs.download_files([FileDownloadRequest(source=p) for p in paths])
        except Exception as exc:
            raise await self._fail(exc, "download files") from exc
        return {r.source: bytes(r.result) for r in results if r.error is None and isinstance(r.result, bytes)}

    async def _session_id(self, sdk: SdkSandbox) -> str:
        if self._session is None:
            session = f"sandboxkit-{uuid.uuid4().hex[:12]}"
            await sdk.process.create_session(session)
            self._session = session
        return self._session

    async def _shell(self, command: str, *, deadline_s: float) -> RawResult:
        from daytona import SessionExecuteRequest

        sdk = await self._bound()
        started = anyio.current_time()
        try:
            session = await self._session_id(sdk)
            with anyio.move_on_after(deadline_s) as scope:
                resp = await sdk.process.execute_session_command(
                    session, SessionExecuteRequest(command=command, run_async=False), timeout=int(deadline_s) + 1
                )
        except Exception as exc:
            raise await self._fail(exc, "run a command") from exc
        if scope.cancelled_caught:
            # The session's shell is still busy with the command: drop the session (the next
            # command gets a new one); the caller kills the process group.
            dead, self._session = self._session, None
            with anyio.move_on_after(10):
                try:
                    await sdk.process.delete_session(dead or "")
                except Exception:
                    log.debug("deleting stuck session of %s failed", self.id, exc_info=True)
            raise NoAnswer
        stdout, stderr = resp.stdout or "", resp.stderr or ""
        if not stdout and not stderr and resp.output:
            stdout = resp.output  # an older daemon merges the streams into `output`; the frame is still there
        return RawResult(stdout, stderr, resp.exit_code, anyio.current_time() - started)

    async def _control(self, command: str, *, deadline_s: float = 30.0) -> RawResult:
        sdk = await self._bound()
        started = anyio.current_time()
        try:
            with anyio.fail_after(deadline_s + 5):
                resp = await sdk.process.exec(command, timeout=int(deadline_s))
        except Exception as exc:
            raise await self._fail(exc, "run a control command") from exc
        return RawResult(resp.result or "", "", resp.exit_code, anyio.current_time() - started)

    async def suspend(self) -> bool:
        """Stop the sandbox (Daytona's ``stop``): its files stay, its processes and memory go.

        Every sandboxkit sandbox is ephemeral (deleted the moment it stops), so it first gets an
        auto-delete interval of the owner's lifetime: a stopped sandbox whose owner died is then
        deleted by Daytona that long after the last renewal (:mod:`._cloud_ttl`), and never before.

        Returns:
            True once stopped; False for a closed or tainted sandbox (nothing changed).

        Raises:
            SandboxCrashed: the sandbox is gone.
            RateLimited, Transient: the service refused or failed for now.
        """
        if self.closed or self.tainted:
            return False
        sdk = await self._bound()
        try:
            await sdk.set_auto_delete_interval(self._backend.lifetime_minutes, request_timeout=30)
            await sdk.stop(timeout=self._backend.create_timeout_s)
        except Exception as exc:
            raise await self._fail(exc, "stop the sandbox") from exc
        self._session = None  # its shell died with the sandbox's processes
        self.stopped = True
        self._backend.suspended(self.id, True)
        return True

    async def resume(self) -> None:
        """Start a stopped sandbox again (Daytona's ``start``), ephemeral once more. Idempotent.

        Its files are there; processes started before :meth:`suspend` are not.

        Raises:
            SandboxCrashed: the sandbox is gone (deleted while stopped).
            CapacityExceeded, RateLimited, Transient: the service cannot start it now.
        """
        if not self.stopped or self.closed:
            return
        sdk = await self._bound()
        try:
            await sdk.start(timeout=self._backend.create_timeout_s)
            await sdk.set_auto_delete_interval(0, request_timeout=30)
        except Exception as exc:
            raise self._backend.map_error(exc, op="start the stopped sandbox", sandbox_id=self.id) from exc
        self.stopped = False
        self._backend.suspended(self.id, False)

    async def alive(self) -> bool:
        """True while the service reports the sandbox as started. Never raises."""
        if self.closed:
            return False
        try:
            sdk = await self._bound()
            with anyio.fail_after(10):
                await sdk.refresh_data(request_timeout=10)
            return str(getattr(sdk.state, "value", sdk.state)) == "started"
        except Exception:
            return False

    async def _destroy(self) -> None:
        sdk = await self._bound()
        await sdk.delete(timeout=30)


class DaytonaBackend(CloudBackend):
    """Creates Daytona sandboxes.

    Args:
        config: the options, a :class:`~sandboxkit.configs.DaytonaConfig` (each one is documented
            there and in docs/backends/daytona.md).
        **options: the same options as keywords (``DaytonaBackend(image="python:3.12")``), validated
            by that model, over ``config`` when both are given.

    Raises:
        BackendUnavailable: no API key (names ``DAYTONA_API_KEY``).
        InvalidRequest: an option is unknown or invalid (resources without an image, say), or an
            unknown language.
    """

    name = "daytona"
    service: ClassVar[str] = "Daytona"
    key_env: ClassVar[str] = "DAYTONA_API_KEY"
    notes: ClassVar[tuple[str, ...]] = (
        "network on/off is fixed when a sandbox is created (network_block_all), from the pool's limits",
        "memory is the sandbox's own (snapshot, or memory_gb with an image)",
        "fork: Daytona's own snapshots (sandbox.create_snapshot, then sandboxes from the snapshot): files only",
        "suspend: Daytona's stop / start (files only: processes and memory are lost)",
    )
    fork_level: ClassVar[str] = "files"
    suspend_level: ClassVar[str] = "files"

    config_model: ClassVar[type[DaytonaConfig]] = DaytonaConfig

    def __init__(self, config: DaytonaConfig | None = None, **options: Any) -> None:
        self.config = config = DaytonaConfig.from_options(config, options)
        super().__init__(config)
        self.api_url = (config.api_url or os.environ.get("DAYTONA_API_URL") or DEFAULT_API_URL).rstrip("/")
        self.target = config.target or os.environ.get("DAYTONA_TARGET") or None
        self.snapshot, self.image = config.snapshot, config.image
        self.cpu, self.memory_gb, self.disk_gb = config.cpu, config.memory_gb, config.disk_gb
        self.auto_stop_minutes, self.ttl_minutes = config.auto_stop_minutes, config.ttl_minutes
        self.labels = dict(config.labels or {})
        self.connection_pool_maxsize = config.connection_pool_maxsize
        # The SDK imports its generated clients lazily, which takes seconds; pay that here rather
        # than inside an event loop that is busy serving a trainer.
        import daytona._async.daytona  # noqa: F401

        self._clients: dict[asyncio.AbstractEventLoop, AsyncDaytona] = {}

    @property
    def lifetime_minutes(self) -> int:
        """The owner's lifetime in Daytona's unit: the dead-man TTL rounded up to whole minutes (at least 1)."""
        return max(1, math.ceil(self.lifetime_s / 60))

    def __repr__(self) -> str:
        return f"DaytonaBackend(api_url={self.api_url!r}, target={self.target!r}, api_key='***')"

    @classmethod
    def _where(cls, options: Mapping[str, object]) -> str:
        return f"API {options.get('api_url') or os.environ.get('DAYTONA_API_URL') or DEFAULT_API_URL}"

    def map_error(self, exc: BaseException, *, op: str, sandbox_id: str | None = None) -> SandboxkitError:
        return map_error(exc, op=op, sandbox_id=sandbox_id, secret=self._secret())

    def _create_timed_out(self, exc: BaseException) -> bool:
        from daytona import DaytonaTimeoutError

        return isinstance(exc, (TimeoutError, DaytonaTimeoutError))

    # ------------------------------------------------------------------ clients (one per loop)

    def _client(self) -> AsyncDaytona:
        from daytona import AsyncDaytona
        from daytona import DaytonaConfig as SdkConfig

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                self._clients.pop(old, None)  # its aiohttp session died with its loop
            config: dict[str, Any] = {"api_key": self._secret(), "api_url": self.api_url}
            if self.target:
                config["target"] = self.target
            if self.connection_pool_maxsize is not None:
                config["connection_pool_maxsize"] = self.connection_pool_maxsize
            try:
                client = AsyncDaytona(SdkConfig(**config))
            except Exception as exc:
                raise self.map_error(exc, op="connect") from exc
            self._clients[loop] = client
        return client

    # ------------------------------------------------------------------ the four primitives

    def _params(self, limits: Limits, labels: Mapping[str, str], source: str | None = None) -> Any:
        from daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams, Resources

        common: dict[str, Any] = {
            "language": "python",
            "labels": {**self.labels, **labels},
            "public": False,
            "ephemeral": True,
            "auto_stop_interval": self.lifetime_minutes if self.auto_stop_minutes is None else self.auto_stop_minutes,
            "network_block_all": not limits.network,
        }
        if self.ttl_minutes is not None:
            common["ttl_minutes"] = self.ttl_minutes
        if source is not None:  # a fork: a sandbox from one of our checkpoints
            return CreateSandboxFromSnapshotParams(snapshot=source, **common)
        if self.image:
            resources = None
            if self.cpu or self.memory_gb or self.disk_gb:
                resources = Resources(cpu=self.cpu, memory=self.memory_gb, disk=self.disk_gb)
            return CreateSandboxFromImageParams(image=self.image, resources=resources, **common)
        return CreateSandboxFromSnapshotParams(snapshot=self.snapshot, **common)

    async def _create(self, limits: Limits, labels: Mapping[str, str], source: str | None = None) -> tuple[str, Any]:
        client = self._client()
        params = self._params(limits, labels, source)
        with anyio.fail_after(self.create_timeout_s + 10):  # backstop over the SDK's own timeout
            sdk = await client.create(params, timeout=self.create_timeout_s)
        return str(sdk.id), sdk

    async def _attach(self, sandbox_id: str, sdk: Any, limits: Limits) -> DaytonaSandbox:
        """Find the user's home directory (the workspace lives there); delete the sandbox if that fails."""
        try:
            with anyio.fail_after(30):
                root = await sdk.get_user_home_dir()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await DaytonaSandbox(self, sdk, limits, "").close()
            if isinstance(exc, Exception):
                raise self.map_error(exc, op="open", sandbox_id=sandbox_id) from exc
            raise
        return DaytonaSandbox(self, sdk, limits, root)

    async def _delete_matching(self, labels: Mapping[str, str], *, sandbox_id: str | None = None) -> int:
        from daytona import ListSandboxesQuery

        client = self._client()
        removed = 0
        if sandbox_id:  # the SDK named it on its timeout error: it exists even if a listing lags
            await (await client.get(sandbox_id)).delete()
            removed += 1
        async for sb in client.list(ListSandboxesQuery(labels=dict(labels))):
            if str(sb.id) == sandbox_id:
                continue
            try:
                await sb.delete()
                removed += 1
            except Exception as exc:
                if _status_of(exc) not in (404, 410):  # deleted meanwhile is fine
                    raise
        return removed

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        await self._client().snapshot.delete(snapshot_id)

    def _delete_snapshot_sync(self, snapshot_id: str) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self._secret()}"}
        found = httpx.get(f"{self.api_url}/snapshots/{snapshot_id}", headers=headers, timeout=5.0)
        if found.status_code == 200:
            httpx.delete(f"{self.api_url}/snapshots/{found.json()['id']}", headers=headers, timeout=5.0)

    async def _delete_snapshots_matching(self, prefix: str) -> int:
        client = self._client()
        names: list[str] = []
        page = 1
        while True:
            listing = await client.snapshot.list(page=page, limit=100)
            names += [s.name for s in listing.items if s.name.startswith(prefix)]
            if page >= listing.total_pages:
                break
            page += 1
        for name in names:
            await client.snapshot.delete(name)
        return len(names)

    @property
    def renew_period_s(self) -> float:
        return self.lifetime_minutes * 60 / 3

    def _renew_sync(self, client: httpx.Client, sandbox_id: str) -> None:
        """``refresh_activity`` by hand (``POST /sandbox/{id}/last-activity``): auto-stop and auto-delete count from it."""
        client.post(
            f"{self.api_url}/sandbox/{sandbox_id}/last-activity",
            headers={"Authorization": f"Bearer {self._secret()}"},
        ).raise_for_status()

    def _delete_now_sync(self, sandbox_id: str) -> None:
        import httpx

        httpx.delete(
            f"{self.api_url}/sandbox/{sandbox_id}", headers={"Authorization": f"Bearer {self._secret()}"}, timeout=5.0
        )

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        """Sweep creates that failed without a trace, then close this loop's client."""
        await super().aclose()
        loop = asyncio.get_running_loop()
        for lp, client in list(self._clients.items()):
            if lp is loop:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await client.close()  # type: ignore[no-untyped-call]
            elif lp.is_running():
                asyncio.run_coroutine_threadsafe(client.close(), lp)  # type: ignore[no-untyped-call]
        self._clients.clear()
