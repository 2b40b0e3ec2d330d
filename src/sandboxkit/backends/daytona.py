"""The ``daytona`` backend: Daytona cloud sandboxes through the ``daytona`` SDK (``AsyncDaytona``).

What this module adds to the SDK is discipline:

* every sandbox carries the labels ``sandboxkit=1``, ``sandboxkit-backend=<this object>`` and a
  label unique to its creation, is ephemeral (deleted when it stops) and auto-stops when idle,
  so a crashed trainer's sandboxes disappear on their own and ``cleanup()`` can find the rest;
* a create that timed out or lost its connection may still have created a sandbox: it is
  looked up by its creation label (or by the id the SDK attaches) and deleted;
* ``AsyncDaytona`` binds its aiohttp session to the event loop that first used it, so the
  backend keeps one client per loop and re-attaches a sandbox to the calling loop's client;
* ``process.exec`` merges stdout and stderr, so programs run as *session commands*, which
  return them separately; our own short commands (kill, reset) use ``process.exec``;
* a session command that outlives the host deadline leaves its shell busy, so the session
  is deleted and the process group killed (see :mod:`sandboxkit.backends._cloud`);
* SDK errors become sandboxkit errors: 429 → RateLimited, 5xx / timeouts / connection →
  Transient, 404 on a sandbox in use → SandboxCrashed, 401/403 → BackendUnavailable.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import SecretStr

from sandboxkit.backends._cloud import (
    CREATE_LABEL,
    ENFORCED_LIMITS,
    INSTANCE_LABEL,
    LABEL,
    CloudSandbox,
    NoAnswer,
    RawResult,
    never_sent,
    redact,
    resolve_secret,
)
from sandboxkit.base import Availability, Backend, Capabilities
from sandboxkit.errors import (
    BackendUnavailable,
    InvalidRequest,
    RateLimited,
    SandboxCrashed,
    SandboxError,
    Transient,
)
from sandboxkit.languages import LANGUAGES, resolve_language
from sandboxkit.models import Limits

if TYPE_CHECKING:
    from daytona import AsyncDaytona
    from daytona._async.sandbox import AsyncSandbox as SdkSandbox

__all__ = ["DaytonaBackend", "DaytonaSandbox"]

log = logging.getLogger(__name__)
DEFAULT_API_URL = "https://app.daytona.io/api"


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


def map_error(exc: BaseException, *, op: str, sandbox_id: str | None = None, secret: str | None = None) -> SandboxError:
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

    def __init__(self, backend: DaytonaBackend, sdk: SdkSandbox, limits: Limits, root: str) -> None:
        super().__init__(backend_name="daytona", sandbox_id=str(sdk.id), limits=limits, grace_s=backend.grace_s)
        self._backend = backend
        self._sdk = sdk
        self._sdk_loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        self._session: str | None = None
        self.root = root

    def __repr__(self) -> str:
        return f"<DaytonaSandbox id={self.id!r} closed={self.closed}>"

    async def _bound(self) -> SdkSandbox:
        """The SDK sandbox object usable on the *calling* loop (AsyncDaytona is loop-bound)."""
        loop = asyncio.get_running_loop()
        if self._sdk_loop is not loop:
            self._sdk = await self._backend._client().get(self.id)
            self._sdk_loop = loop
            self._session = None  # sessions are per sandbox, but re-create rather than trust an old id
        return self._sdk

    async def _fail(self, exc: BaseException, op: str) -> SandboxError:
        err = map_error(exc, op=op, sandbox_id=self.id, secret=self._backend._secret())
        if type(err) is Transient and not await self.alive():
            err = SandboxCrashed(
                f"the sandbox stopped answering during {op} and is gone; it is discarded",
                backend="daytona",
                sandbox_id=self.id,
            )
        return err

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
            stderr = resp.output  # an older daemon merges the streams into `output`
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

    async def close(self) -> None:
        """Delete the sandbox (idempotent, shielded)."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            try:
                sdk = await self._bound()
                await sdk.delete(timeout=30)
            except Exception as exc:
                if _status_of(exc) not in (404, 410):
                    log.warning("deleting Daytona sandbox %s failed: %s", self.id, type(exc).__name__)
        self._backend._forget(self.id)


class DaytonaBackend(Backend):
    """Creates Daytona sandboxes.

    Args:
        api_key: API key (default: ``DAYTONA_API_KEY``). Never logged or shown in reprs.
        api_url: API URL (default: ``DAYTONA_API_URL``, else Daytona Cloud).
        target: region (default: ``DAYTONA_TARGET``, else the organisation's default).
        snapshot: snapshot to create sandboxes from (default: Daytona's default snapshot).
        image: create from this image instead (needed for ``cpu`` / ``memory_gb`` / ``disk_gb``).
        cpu, memory_gb, disk_gb: resources per sandbox (image-based sandboxes only).
        auto_stop_minutes: an idle sandbox stops (and, being ephemeral, is deleted) after this
            long; the backstop against leaks. 0 disables it (not recommended).
        ttl_minutes: hard wall-clock lifetime of a sandbox (None = no limit).
        create_timeout_s: how long one creation may take before it is abandoned (and cleaned up).
        grace_s: how much longer than a run's limit the host waits for the service.
        labels: extra labels put on every sandbox.
        languages: languages the image can run (default: all of sandboxkit's; a missing
            toolchain is reported as ToolchainMissing when used).
        connection_pool_maxsize: aiohttp pool size of the SDK (None = SDK default).

    Raises:
        BackendUnavailable: no API key (names ``DAYTONA_API_KEY``).
        InvalidRequest: resources without an image, or an unknown language.
    """

    name = "daytona"

    def __init__(
        self,
        *,
        api_key: str | SecretStr | None = None,
        api_url: str | None = None,
        target: str | None = None,
        snapshot: str | None = None,
        image: str | None = None,
        cpu: int | None = None,
        memory_gb: int | None = None,
        disk_gb: int | None = None,
        auto_stop_minutes: int = 15,
        ttl_minutes: int | None = None,
        create_timeout_s: float = 60.0,
        grace_s: float = 15.0,
        labels: Mapping[str, str] | None = None,
        languages: Sequence[str] | None = None,
        connection_pool_maxsize: int | None = None,
    ) -> None:
        self._api_key = resolve_secret(api_key, os.environ.get("DAYTONA_API_KEY"))
        if self._api_key is None:
            raise BackendUnavailable(
                "DAYTONA_API_KEY is not set; export DAYTONA_API_KEY=<your key> (or pass api_key=...) "
                "to use the daytona backend",
                backend="daytona",
            )
        self.api_url = (api_url or os.environ.get("DAYTONA_API_URL") or DEFAULT_API_URL).rstrip("/")
        self.target = target or os.environ.get("DAYTONA_TARGET") or None
        if (cpu or memory_gb or disk_gb) and not image:
            raise InvalidRequest(
                "Daytona applies cpu/memory_gb/disk_gb only to sandboxes built from an image; pass image=... "
                "or size the snapshot instead",
                backend="daytona",
            )
        self.snapshot, self.image = snapshot, image
        self.cpu, self.memory_gb, self.disk_gb = cpu, memory_gb, disk_gb
        self.auto_stop_minutes, self.ttl_minutes = auto_stop_minutes, ttl_minutes
        self.create_timeout_s, self.grace_s = create_timeout_s, grace_s
        self.labels = dict(labels or {})
        self.languages = frozenset(resolve_language(x).name for x in (languages or LANGUAGES))
        self.connection_pool_maxsize = connection_pool_maxsize
        self.instance_id = uuid.uuid4().hex[:12]
        # The SDK imports its generated clients lazily, which takes seconds; pay that here rather
        # than inside an event loop that is busy serving a trainer.
        import daytona._async.daytona  # noqa: F401

        self._clients: dict[asyncio.AbstractEventLoop, AsyncDaytona] = {}
        self._live: set[str] = set()
        self._pending_tokens: set[str] = set()

    def __repr__(self) -> str:
        return f"DaytonaBackend(api_url={self.api_url!r}, target={self.target!r}, api_key='***')"

    def _secret(self) -> str:
        assert self._api_key is not None
        return self._api_key.get_secret_value()

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Usable when an API key is configured (the service itself is not contacted)."""
        key = options.get("api_key") or os.environ.get("DAYTONA_API_KEY")
        if not key:
            return Availability(False, "DAYTONA_API_KEY is not set; export it (or pass api_key=...)")
        url = options.get("api_url") or os.environ.get("DAYTONA_API_URL") or DEFAULT_API_URL
        return Availability(True, f"API {url}")

    @property
    def capabilities(self) -> Capabilities:
        """Languages of the image, separate streams, limits enforced inside the sandbox."""
        return Capabilities(
            languages=self.languages,
            stateful=True,
            network_control=True,
            limits=ENFORCED_LIMITS,
            resettable=True,
            notes=(
                "network on/off is fixed when a sandbox is created (network_block_all), from the pool's limits",
                "memory is the sandbox's own (snapshot, or memory_gb with an image)",
            ),
        )

    # ------------------------------------------------------------------ clients (one per loop)

    def _client(self) -> AsyncDaytona:
        from daytona import AsyncDaytona, DaytonaConfig

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
                client = AsyncDaytona(DaytonaConfig(**config))
            except Exception as exc:
                raise map_error(exc, op="connect", secret=self._secret()) from exc
            self._clients[loop] = client
        return client

    def _forget(self, sandbox_id: str) -> None:
        self._live.discard(sandbox_id)

    # ------------------------------------------------------------------ lifecycle

    def _params(self, limits: Limits, token: str) -> Any:
        from daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams, Resources

        labels = {**self.labels, LABEL: "1", INSTANCE_LABEL: self.instance_id, CREATE_LABEL: token}
        common: dict[str, Any] = {
            "language": "python",
            "labels": labels,
            "public": False,
            "ephemeral": True,
            "auto_stop_interval": self.auto_stop_minutes,
            "network_block_all": not limits.network,
        }
        if self.ttl_minutes is not None:
            common["ttl_minutes"] = self.ttl_minutes
        if self.image:
            resources = None
            if self.cpu or self.memory_gb or self.disk_gb:
                resources = Resources(cpu=self.cpu, memory=self.memory_gb, disk=self.disk_gb)
            return CreateSandboxFromImageParams(image=self.image, resources=resources, **common)
        return CreateSandboxFromSnapshotParams(snapshot=self.snapshot, **common)

    async def open(self, limits: Limits | None = None) -> DaytonaSandbox:
        """Create a sandbox (labelled, ephemeral, auto-stopping) and find its home directory.

        Raises:
            BackendUnavailable: bad credentials or API URL.
            RateLimited: Daytona answered 429 (``retry_after`` set when it said how long).
            Transient: 5xx, a timeout or a connection failure; anything created is deleted.
            InvalidRequest: Daytona rejected the parameters.
        """
        limits = limits or Limits()
        client = self._client()
        token = uuid.uuid4().hex
        params = self._params(limits, token)
        try:
            with anyio.fail_after(self.create_timeout_s + 10):  # backstop over the SDK's own timeout
                sdk = await client.create(params, timeout=self.create_timeout_s)
        except BaseException as exc:
            from daytona import DaytonaTimeoutError

            if _may_have_created(exc):
                with anyio.CancelScope(shield=True):
                    await self._reap(client, token, getattr(exc, "sandbox_id", None))
            if isinstance(exc, (TimeoutError, DaytonaTimeoutError)):
                raise Transient(
                    f"creating a Daytona sandbox took longer than {self.create_timeout_s:g}s; "
                    "anything it created was deleted",
                    backend="daytona",
                ) from exc
            if isinstance(exc, Exception):
                raise map_error(exc, op="create", secret=self._secret()) from exc
            raise
        self._live.add(str(sdk.id))
        try:
            with anyio.fail_after(30):
                root = await sdk.get_user_home_dir()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await DaytonaSandbox(self, sdk, limits, "").close()
            if isinstance(exc, Exception):
                raise map_error(exc, op="open", sandbox_id=str(sdk.id), secret=self._secret()) from exc
            raise
        return DaytonaSandbox(self, sdk, limits, root)

    async def _reap(self, client: AsyncDaytona, token: str, sandbox_id: str | None) -> None:
        """Delete what a failed create may have left: by the id the SDK reported, else by label."""
        from daytona import ListSandboxesQuery

        found = 0
        with anyio.move_on_after(20):
            try:
                if sandbox_id:
                    await (await client.get(sandbox_id)).delete()
                    found += 1
                async for sb in client.list(ListSandboxesQuery(labels={CREATE_LABEL: token})):
                    if str(sb.id) != sandbox_id:
                        await sb.delete()
                        found += 1
            except Exception as exc:
                log.debug("cleaning up after a failed Daytona create: %s", type(exc).__name__)
        if found:
            log.info("deleted %d Daytona sandbox(es) left by a failed create", found)
        else:
            self._pending_tokens.add(token)  # it may still appear: look again at aclose()

    async def cleanup(self) -> int:
        """Delete every sandbox labelled ``sandboxkit=1`` in this account (all runs, not just ours)."""
        from daytona import ListSandboxesQuery

        client = self._client()
        removed = 0
        try:
            async for sb in client.list(ListSandboxesQuery(labels={LABEL: "1"})):
                try:
                    await sb.delete()
                    removed += 1
                except Exception as exc:
                    if _status_of(exc) not in (404, 410):
                        raise
        except Exception as exc:
            raise map_error(exc, op="clean up", secret=self._secret()) from exc
        return removed

    async def aclose(self) -> None:
        """Sweep creates that failed without a trace, then close this loop's client."""
        loop = asyncio.get_running_loop()
        if self._pending_tokens:
            from daytona import ListSandboxesQuery

            client = self._client()
            with anyio.CancelScope(shield=True), anyio.move_on_after(20):
                for token in list(self._pending_tokens):
                    try:
                        async for sb in client.list(ListSandboxesQuery(labels={CREATE_LABEL: token})):
                            await sb.delete()
                        self._pending_tokens.discard(token)
                    except Exception:
                        log.debug("sweeping a failed Daytona create failed", exc_info=True)
        for lp, client in list(self._clients.items()):
            if lp is loop:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await client.close()  # type: ignore[no-untyped-call]
            elif lp.is_running():
                asyncio.run_coroutine_threadsafe(client.close(), lp)  # type: ignore[no-untyped-call]
        self._clients.clear()

    def emergency_cleanup(self) -> None:
        """Delete the sandboxes this object still holds, synchronously (interpreter exit)."""
        import httpx

        for sandbox_id in list(self._live):
            try:
                httpx.delete(
                    f"{self.api_url}/sandbox/{sandbox_id}",
                    headers={"Authorization": f"Bearer {self._secret()}"},
                    timeout=5.0,
                )
                self._live.discard(sandbox_id)
            except Exception:
                log.debug("emergency delete of Daytona sandbox %s failed", sandbox_id)


def _may_have_created(exc: BaseException) -> bool:
    """Whether a failed create may still have left a sandbox behind (so it must be looked for)."""
    if not isinstance(exc, Exception):
        return True  # cancelled mid-request
    if never_sent(exc):
        return False
    status = _status_of(exc)
    return status is None or status >= 500 or status == 408  # a 4xx means the API refused it
