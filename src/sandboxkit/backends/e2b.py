"""The ``e2b`` backend: E2B cloud sandboxes through the ``e2b`` SDK (``AsyncSandbox``).

What this module adds to the SDK:

* every sandbox carries the sandboxkit metadata (see :mod:`sandboxkit.backends._cloud_backend`,
  which also runs the create-or-reap ladder) and a short lifetime (``timeout``) that is renewed
  while the sandbox is in use, so a crashed trainer's sandboxes die on their own within minutes;
* creations go out with the SDK's own retries off, so a 429 reaches the pool (RateLimited),
  whose token bucket slows *every* caller down instead of each retrying in a tight loop;
* ``commands.run`` raises ``CommandExitException`` on a non-zero exit: here that is a result;
* a command is started in the background and awaited with the host deadline; if it passes,
  the command is killed (``SendSignal``) and its process group too, since E2B's own timeout
  only stops the stream, not the process (E2B#500);
* SDK errors become sandboxkit errors: the team's concurrent-sandbox limit (429 "you have
  reached the maximum number of concurrent E2B sandboxes (N)") → CapacityExceeded (``limit`` =
  N), other 429s → RateLimited, 5xx / timeouts / connection → Transient, a sandbox that is gone
  → SandboxCrashed, bad key → BackendUnavailable;
* envd decodes each output chunk as UTF-8 on its own, so the program's bytes come back
  base64-encoded by the wrapper (:mod:`sandboxkit.backends._wrapper`), byte-exact.

The SDK's clients are loop-agnostic (pyqwest), so one backend object can serve several event
loops without per-loop clients.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from sandboxkit.backends._cloud_backend import CloudBackend, named_limit
from sandboxkit.backends._cloud_sandbox import CloudSandbox, NoAnswer, RawResult, redact
from sandboxkit.configs import E2BConfig
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
    from e2b import AsyncSandbox

__all__ = ["E2BBackend", "E2BSandbox", "map_error"]

log = logging.getLogger(__name__)


def map_error(
    exc: BaseException, *, op: str, sandbox_id: str | None = None, secret: str | None = None
) -> SandboxkitError:
    """Translate an E2B SDK / transport error into the sandboxkit error tree.

    Args:
        exc: what the SDK raised.
        op: what we were doing ("create", "run a command"...), for the message.
        sandbox_id: the sandbox in use, if any.
        secret: the API key, redacted from the message should the SDK ever echo it.
    """
    from e2b import (
        AuthenticationException,
        InvalidArgumentException,
        NotFoundException,
        RateLimitException,
        SandboxNotFoundException,
        SandboxNotRunningException,
        TemplateException,
    )

    detail = redact(f"{type(exc).__name__}: {exc}", secret)
    where: dict[str, Any] = {"backend": "e2b", "sandbox_id": sandbox_id}
    if isinstance(exc, RateLimitException):
        # e2b-dev/infra, packages/api/internal/orchestrator/create_instance.go: 429 "you have reached
        # the maximum number of concurrent E2B sandboxes (N)"; the SDK prefixes "429: Rate limit exceeded".
        if "concurrent" in str(exc).lower():
            limit = named_limit(str(exc))
            return CapacityExceeded(
                f"E2B refused to {op}: the team is at its concurrent-sandbox limit ({detail}); the pool lowers "
                "its sandbox cap and waits for one of its sandboxes to close. To run more at once, raise the "
                f"team's limit (E2B dashboard, billing) or set max_sandboxes to {int(limit) if limit else 'it'} "
                "or less",
                limit=limit,
                **where,
            )
        return RateLimited(
            f"E2B refused to {op} for now ({detail}); the pool backs off and retries, "
            "lower creation_rate / max_sandboxes if this persists (E2B caps concurrent sandboxes per team)",
            **where,
        )
    if isinstance(exc, AuthenticationException):
        return BackendUnavailable(f"E2B rejected the API key during {op} ({detail}); check E2B_API_KEY", **where)
    if isinstance(exc, (SandboxNotRunningException, SandboxNotFoundException)) or (
        isinstance(exc, NotFoundException) and sandbox_id is not None and op != "read files"
    ):
        return SandboxCrashed(f"the sandbox is gone ({detail}); it is discarded and a fresh one is used next", **where)
    if isinstance(exc, TemplateException):
        return BackendUnavailable(f"E2B cannot use the template ({detail}); pass a valid template=", **where)
    if isinstance(exc, InvalidArgumentException) and op == "create":
        return InvalidRequest(f"E2B rejected the sandbox parameters ({detail}); fix the backend options", **where)
    return Transient(f"E2B {op} failed ({detail}); retrying on a fresh sandbox may help", **where)


class E2BSandbox(CloudSandbox):
    """One E2B sandbox. Use it through :class:`~sandboxkit.pool.SandboxPool`."""

    _backend: E2BBackend

    def __init__(self, backend: E2BBackend, sdk: AsyncSandbox, limits: Limits) -> None:
        super().__init__(backend, sandbox_id=str(sdk.sandbox_id), limits=limits)
        self._sdk = sdk
        self._expires_at = time.monotonic() + backend.sandbox_lifetime_s
        #: Paused by :meth:`suspend`; E2B answers no command until :meth:`resume`.
        self.paused = False

    async def _keep_alive(self) -> None:
        """Renew the sandbox's lifetime once half of it is used (one API call per half-lifetime)."""
        ttl = self._backend.sandbox_lifetime_s
        if self._expires_at - time.monotonic() > ttl / 2:
            return
        try:
            await self._sdk.set_timeout(ttl, retries=3)
        except Exception as exc:
            raise await self._fail(exc, "renew the sandbox lifetime") from exc
        self._expires_at = time.monotonic() + ttl

    async def _upload(self, files: Mapping[str, bytes]) -> None:
        await self._keep_alive()
        try:
            await self._sdk.files.write_files([{"path": p, "data": d} for p, d in files.items()])
        except Exception as exc:
            raise await self._fail(exc, "write files") from exc

    async def _download(self, paths: Sequence[str]) -> dict[str, bytes]:
        from e2b import FileNotFoundException

        async def one(path: str) -> tuple[str, bytes | None]:
            try:
                return path, bytes(await self._sdk.files.read(path, format="bytes"))
            except FileNotFoundException:
                return path, None

        try:
            got = await asyncio.gather(*(one(p) for p in paths))
        except Exception as exc:
            raise await self._fail(exc, "read files") from exc
        return {p: data for p, data in got if data is not None}

    async def _shell(self, command: str, *, deadline_s: float) -> RawResult:
        from e2b import CommandExitException

        await self._keep_alive()
        started = anyio.current_time()
        try:
            handle = await self._sdk.commands.run(
                command,
                background=True,
                timeout=deadline_s + 5,
                request_timeout=self._backend.request_timeout_s,
                user=self._backend.user,
            )
        except Exception as exc:
            raise await self._fail(exc, "start a command") from exc
        try:
            with anyio.fail_after(deadline_s):
                result = await handle.wait()
            return RawResult(result.stdout, result.stderr, result.exit_code, anyio.current_time() - started)
        except CommandExitException as exc:  # a non-zero exit is a result, not an error
            return RawResult(exc.stdout, exc.stderr, exc.exit_code, anyio.current_time() - started)
        except TimeoutError:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                try:
                    await handle.kill()
                except Exception:
                    log.debug("killing command %s in %s failed", handle.pid, self.id, exc_info=True)
                try:
                    await handle.disconnect()
                except Exception:
                    pass
            raise NoAnswer from None
        except Exception as exc:
            raise await self._fail(exc, "run a command") from exc

    async def _take_snapshot(self, name: str) -> str:
        """Files, processes and memory, with E2B's own snapshot API.

        E2B pauses the sandbox while it snapshots and resumes it; sandboxes created from the
        snapshot restore its memory.
        """
        info = await self._sdk.create_snapshot(name, request_timeout=self._backend.create_timeout_s)
        return str(info.snapshot_id)

    async def suspend(self) -> bool:
        """Pause the sandbox with E2B's pause (memory and files kept; it holds no CPU and bills no compute).

        Its processes, a kernel's variables included, go on where they stopped after :meth:`resume`.
        A paused sandbox has no timeout at E2B: if this process dies meanwhile, it stays paused until
        ``sandboxkit cleanup`` (docs/fleet.md).

        Returns:
            True once paused; False for a closed or tainted sandbox (nothing changed).

        Raises:
            SandboxCrashed: the sandbox is gone.
            RateLimited, Transient: the service refused or failed for now (the sandbox still runs).
        """
        if self.closed or self.tainted:
            return False
        try:
            await self._sdk.pause(request_timeout=self._backend.create_timeout_s)
        except Exception as exc:
            raise await self._fail(exc, "pause the sandbox") from exc
        self.paused = True
        self._backend.suspended(self.id, True)
        return True

    async def resume(self) -> None:
        """Resume a paused sandbox (E2B's ``connect``), its lifetime set again from now. Idempotent.

        Raises:
            SandboxCrashed: the sandbox is gone (killed while paused).
            CapacityExceeded, RateLimited, Transient: the service cannot run it now.
        """
        if not self.paused or self.closed:
            return
        ttl = self._backend.sandbox_lifetime_s
        try:
            await self._sdk.connect(timeout=ttl, request_timeout=self._backend.create_timeout_s)
        except Exception as exc:
            raise self._backend.map_error(exc, op="resume the sandbox", sandbox_id=self.id) from exc
        self.paused = False
        self._backend.suspended(self.id, False)
        self._expires_at = time.monotonic() + ttl

    async def alive(self) -> bool:
        """True while envd in the sandbox answers its health check. Never raises."""
        if self.closed:
            return False
        try:
            with anyio.fail_after(10):
                return bool(await self._sdk.is_running(request_timeout=5))
        except Exception:
            return False

    async def _destroy(self) -> None:
        await self._sdk.kill(request_timeout=30, retries=3)  # the create call ran with retries=0


class E2BBackend(CloudBackend):
    """Creates E2B sandboxes.

    Args:
        config: the options, a :class:`~sandboxkit.configs.E2BConfig` (each one is documented there
            and in docs/backends/e2b.md).
        **options: the same options as keywords (``E2BBackend(template="base")``), validated by that
            model, over ``config`` when both are given.

    Raises:
        BackendUnavailable: no API key (names ``E2B_API_KEY``).
        InvalidRequest: an option is unknown or invalid, or an unknown language.
    """

    name = "e2b"
    service: ClassVar[str] = "E2B"
    key_env: ClassVar[str] = "E2B_API_KEY"
    removed: ClassVar[str] = "killed"
    notes: ClassVar[tuple[str, ...]] = (
        "network on/off is fixed when a sandbox is created (allow_internet_access), from the pool's limits",
        "memory and CPU are the template's",
        "fork: E2B's own snapshots (create_snapshot, then sandboxes from the snapshot): files, processes, memory",
        "suspend: E2B's pause / connect (files, processes, memory); a paused sandbox has no timeout at E2B",
    )
    fork_level: ClassVar[str] = "memory"
    suspend_level: ClassVar[str] = "files+memory"

    config_model: ClassVar[type[E2BConfig]] = E2BConfig

    def __init__(self, config: E2BConfig | None = None, **options: Any) -> None:
        self.config = config = E2BConfig.from_options(config, options)
        super().__init__(config)
        self.domain = config.domain or os.environ.get("E2B_DOMAIN") or None
        self.api_url = (config.api_url or os.environ.get("E2B_API_URL") or "").rstrip("/") or None
        self.sandbox_url = (config.sandbox_url or os.environ.get("E2B_SANDBOX_URL") or "").rstrip("/") or None
        self.template = config.template
        self.sandbox_timeout_s = config.sandbox_timeout_s
        self.request_timeout_s = config.request_timeout_s
        self.metadata = dict(config.metadata or {})
        self.user = config.user
        self.http_version = config.http_version

    @property
    def sandbox_lifetime_s(self) -> int:
        """E2B's ``timeout`` of each sandbox: ``sandbox_timeout_s`` when set, else the pool's dead-man TTL.

        The owner renews it while it lives (every call, and :mod:`._cloud_ttl` between calls), so a
        SIGKILLed trainer's sandboxes are killed by E2B this long after its last renewal.
        """
        chosen = self.sandbox_timeout_s if self.sandbox_timeout_s is not None else self.lifetime_s
        return max(1, math.ceil(chosen))

    def __repr__(self) -> str:
        where = self.api_url or f"https://api.{self.domain or 'e2b.app'}"
        return f"E2BBackend(api_url={where!r}, template={self.template!r}, api_key='***')"

    def _params(self, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"api_key": self._secret(), "request_timeout": self.request_timeout_s}
        for key in ("domain", "api_url", "sandbox_url", "http_version"):
            if getattr(self, key):
                params[key] = getattr(self, key)
        params.update(extra)
        return params

    @classmethod
    def _where(cls, options: Mapping[str, object]) -> str:
        return f"domain {options.get('domain') or os.environ.get('E2B_DOMAIN') or 'e2b.app'}"

    def map_error(self, exc: BaseException, *, op: str, sandbox_id: str | None = None) -> SandboxkitError:
        return map_error(exc, op=op, sandbox_id=sandbox_id, secret=self._secret())

    # ------------------------------------------------------------------ the four primitives

    async def _create(self, limits: Limits, labels: Mapping[str, str], source: str | None = None) -> tuple[str, Any]:
        """Create with the SDK's retries off: a 429 reaches the pool, whose bucket slows every caller.

        ``source``: a snapshot id (a fork): E2B creates sandboxes from a snapshot as from a template.
        """
        from e2b import AsyncSandbox

        with anyio.fail_after(self.create_timeout_s):
            sdk = await AsyncSandbox.create(
                template=source or self.template,
                timeout=self.sandbox_lifetime_s,
                metadata={**self.metadata, **labels},
                allow_internet_access=limits.network,
                **self._params(retries=0, request_timeout=self.create_timeout_s + 5),
            )
        return str(sdk.sandbox_id), sdk

    async def _attach(self, sandbox_id: str, sdk: Any, limits: Limits) -> E2BSandbox:
        return E2BSandbox(self, sdk, limits)

    async def _delete_matching(self, labels: Mapping[str, str], *, sandbox_id: str | None = None) -> int:
        from e2b import AsyncSandbox, SandboxQuery

        paginator = AsyncSandbox.list(query=SandboxQuery(metadata=dict(labels)), **self._params())
        removed = 0
        while paginator.has_next:
            for info in await paginator.next_items():
                if await AsyncSandbox.kill(info.sandbox_id, **self._params()):
                    removed += 1
        return removed

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        from e2b import AsyncSandbox

        await AsyncSandbox.delete_snapshot(snapshot_id, **self._params())

    def _delete_snapshot_sync(self, snapshot_id: str) -> None:
        import httpx

        base = self.api_url or f"https://api.{self.domain or 'e2b.app'}"
        quoted = urllib.parse.quote(snapshot_id, safe="")
        httpx.delete(f"{base}/templates/{quoted}", headers={"X-API-KEY": self._secret()}, timeout=5.0)

    async def _delete_snapshots_matching(self, prefix: str) -> int:
        from e2b import AsyncSandbox

        paginator = AsyncSandbox.list_snapshots(**self._params())
        removed = 0
        while paginator.has_next:
            for info in await paginator.next_items():
                names = [n.split("/")[-1] for n in [info.snapshot_id, *info.names]]
                if any(n.startswith(prefix) for n in names) and await AsyncSandbox.delete_snapshot(
                    info.snapshot_id, **self._params()
                ):
                    removed += 1
        return removed

    @property
    def renew_period_s(self) -> float:
        return self.sandbox_lifetime_s / 3

    def _renew_sync(self, client: httpx.Client, sandbox_id: str) -> None:
        """``set_timeout`` by hand (``POST /sandboxes/{id}/timeout``); a paused sandbox has no timeout to renew."""
        if sandbox_id in self._suspended:
            return
        base = self.api_url or f"https://api.{self.domain or 'e2b.app'}"
        client.post(
            f"{base}/sandboxes/{sandbox_id}/timeout",
            json={"timeout": self.sandbox_lifetime_s},
            headers={"X-API-KEY": self._secret()},
        ).raise_for_status()

    def _delete_now_sync(self, sandbox_id: str) -> None:
        import httpx

        base = self.api_url or f"https://api.{self.domain or 'e2b.app'}"
        httpx.delete(f"{base}/sandboxes/{sandbox_id}", headers={"X-API-KEY": self._secret()}, timeout=5.0)
