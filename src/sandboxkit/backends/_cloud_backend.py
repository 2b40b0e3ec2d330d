"""What the cloud backends (Daytona, E2B) share on the backend side: one :class:`CloudBackend`.

A cloud service's sandboxes are billed and counted against a quota, and can outlive the
process that created them. The discipline that keeps them from leaking is the same for every
service, so it is written once here:

* the API key comes from an option or the environment, is held as a :class:`SecretStr` and is
  redacted from every message built from an SDK error;
* every sandbox is labelled ``sandboxkit=1``, ``sandboxkit-backend=<this object>`` and with a
  label unique to its creation, so a create whose answer never came can still be found;
* ``open()`` runs the create-or-reap ladder: a create that failed *after* it may have reached
  the service (timeout, reset, 5xx, cancellation) is followed by a search for that creation's
  label and a delete; one not found yet is looked for again at :meth:`CloudBackend.aclose`;
* the ids of live sandboxes are kept, so :meth:`CloudBackend.emergency_cleanup` can delete
  them synchronously at interpreter exit, without an event loop.

A service plugs in four primitives (:meth:`~CloudBackend._create`,
:meth:`~CloudBackend._delete_matching`, :meth:`~CloudBackend._delete_now_sync`,
:meth:`~CloudBackend.map_error`) and :meth:`~CloudBackend._attach`, which turns the SDK's
sandbox object into a :class:`~sandboxkit.backends._cloud_sandbox.CloudSandbox`.

Quota and capacity refusals ("Total CPU limit exceeded", "maximum number of concurrent
sandboxes") are :class:`~sandboxkit.errors.CapacityExceeded`: the pool learns the service's
real concurrency from them and queues calls behind it instead of failing them.
"""

from __future__ import annotations

import abc
import logging
import os
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import anyio.to_thread

from sandboxkit._watchdog import ttl_for
from sandboxkit.backends._cloud_sandbox import (
    CREATE_LABEL,
    ENFORCED_LIMITS,
    INSTANCE_LABEL,
    LABEL,
    CloudSandbox,
    never_sent,
    redact,
    resolve_secret,
)
from sandboxkit.backends._cloud_ttl import Renewer
from sandboxkit.base import Availability, Backend, Capabilities, Snapshot, own_snapshot
from sandboxkit.configs import CloudConfig
from sandboxkit.errors import BackendUnavailable, SandboxkitError, Transient
from sandboxkit.languages import LANGUAGES, resolve_language
from sandboxkit.models import Limits

if TYPE_CHECKING:
    import httpx

__all__ = ["CloudBackend", "named_limit"]

log = logging.getLogger(__name__)

_NUMBER = re.compile(r"(?:maximum allowed:\s*|\()(\d+(?:\.\d+)?)", re.IGNORECASE)


def named_limit(text: str) -> float | None:
    """The limit a quota message names ("Maximum allowed: 10." / "sandboxes (20)"), if any."""
    match = _NUMBER.search(text)
    return float(match.group(1)) if match else None


#: Name prefix of every checkpoint sandboxkit takes at a service (``cleanup`` deletes them).
SNAPSHOT_PREFIX = "sandboxkit-"


class CloudSnapshot(Snapshot):
    """A checkpoint held by the service (an E2B snapshot template): sandboxes are created from its id."""

    def __init__(self, backend: CloudBackend, snapshot_id: str) -> None:
        self.id = snapshot_id
        self.backend = backend
        self.backend_name = backend.name
        self.released = False

    async def release(self) -> None:
        """Delete it at the service. Idempotent, shielded; a failure is logged (``cleanup`` finds it later)."""
        if self.released:
            return
        self.released = True
        self.backend._snapshots.discard(self)
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            try:
                await self.backend._delete_snapshot(self.id)
            except Exception:
                log.warning(
                    "deleting %s checkpoint %s failed; `sandboxkit cleanup` removes it", self.backend_name, self.id
                )

    def release_sync(self) -> None:
        if self.released:
            return
        self.released = True
        self.backend._snapshots.discard(self)
        try:
            self.backend._delete_snapshot_sync(self.id)
        except Exception:
            log.debug("emergency delete of checkpoint %s failed", self.id, exc_info=True)

    def __repr__(self) -> str:
        return f"<CloudSnapshot {self.backend_name} {self.id}>"


class CloudBackend(Backend):
    """Base of the backends whose sandboxes live in a cloud service.

    Args:
        config: the service's options, a :class:`~sandboxkit.configs.CloudConfig` subclass that the
            subclass's constructor validated (its ``api_key``, ``create_timeout_s``, ``grace_s`` and
            ``languages`` are read here).

    Raises:
        BackendUnavailable: no API key (names the environment variable).
    """

    #: Name of the service in messages ("Daytona", "E2B").
    service: ClassVar[str] = ""
    #: Environment variable holding the API key.
    key_env: ClassVar[str] = ""
    #: What the service does to a sandbox we drop ("deleted", "killed"), for messages.
    removed: ClassVar[str] = "deleted"
    #: Capability notes of the service (how network and memory are set).
    notes: ClassVar[tuple[str, ...]] = ()
    #: What a checkpoint of the service carries (``Capabilities.fork``); "none": no snapshot primitives.
    fork_level: ClassVar[str] = "none"
    #: What survives the service's own suspend (``Capabilities.suspend``); "none": it has none.
    suspend_level: ClassVar[str] = "none"

    def __init__(self, config: CloudConfig) -> None:
        self._api_key = resolve_secret(config.api_key, os.environ.get(self.key_env))
        if self._api_key is None:
            raise BackendUnavailable(
                f"{self.key_env} is not set; export {self.key_env}=<your key> (or pass api_key=...) "
                f"to use the {self.name} backend",
                backend=self.name,
            )
        self.create_timeout_s, self.grace_s = config.create_timeout_s, config.grace_s
        self.languages = frozenset(resolve_language(x).name for x in (config.languages or LANGUAGES))
        self.instance_id = uuid.uuid4().hex[:12]
        self._live: set[str] = set()
        self._pending_tokens: set[str] = set()
        self._snapshots: set[CloudSnapshot] = set()  # checkpoints taken and not yet released
        self._interrupted: set[str] = set()  # sandboxes whose close was cancelled before the delete finished
        self._suspended: set[str] = set()  # sandboxes stopped or paused by Sandbox.suspend
        self._renewer = Renewer(self._live, self._renew_sync, lambda: self.renew_period_s, self.name)

    def _secret(self) -> str:
        assert self._api_key is not None
        return self._api_key.get_secret_value()

    def _detail(self, exc: BaseException) -> str:
        """An SDK error as text for our messages, with the API key redacted."""
        return redact(f"{type(exc).__name__}: {exc}", self._secret())

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Usable when an API key is configured (the service itself is not contacted)."""
        if not (options.get("api_key") or os.environ.get(cls.key_env)):
            return Availability(False, f"{cls.key_env} is not set; export it (or pass api_key=...)")
        return Availability(True, cls._where(options))

    @classmethod
    def _where(cls, options: Mapping[str, object]) -> str:
        """Where the service is, for ``sandboxkit backends`` (no request is made)."""
        return cls.service

    @property
    def capabilities(self) -> Capabilities:
        """Languages of the image, separate streams, limits enforced inside the sandbox."""
        return Capabilities(
            languages=self.languages,
            stateful=True,
            network_control=True,
            limits=ENFORCED_LIMITS,
            resettable=True,
            absolute_paths=True,  # a cloud sandbox is a machine of its own: its "/" is never this host's
            notes=self.notes,
            fork=self.fork_level,
            suspend=self.suspend_level,
        )

    @property
    def lifetime_s(self) -> float:
        """How long a sandbox outlives a dead owner: the pool's dead-man TTL (:func:`~sandboxkit._watchdog.ttl_for`)."""
        return self.owner_ttl_s or ttl_for(None, Limits())

    @property
    def renew_period_s(self) -> float:
        """Seconds between two renewals of a held sandbox's expiry at the service (:mod:`._cloud_ttl`)."""
        return self.lifetime_s / 3

    def _renew_sync(self, client: httpx.Client, sandbox_id: str) -> None:
        """Push one held sandbox's expiry at the service one lifetime away (blocking; a renewer thread calls it)."""

    def sandbox_closed(self, sandbox_id: str, *, deleted: bool) -> None:
        """Called by a sandbox's ``close``: forget it once deleted, else delete it at ``aclose`` / exit."""
        self._suspended.discard(sandbox_id)
        if deleted:
            self._live.discard(sandbox_id)
        else:
            self._interrupted.add(sandbox_id)

    def suspended(self, sandbox_id: str, now: bool) -> None:
        """Called by a sandbox's ``suspend`` (``now`` True) and ``resume``: renewals treat the two states apart."""
        if now:
            self._suspended.add(sandbox_id)
        else:
            self._suspended.discard(sandbox_id)

    # ------------------------------------------------------------------ the four primitives

    @abc.abstractmethod
    async def _create(self, limits: Limits, labels: Mapping[str, str], source: str | None = None) -> tuple[str, Any]:
        """Create one sandbox with ``labels`` (network from ``limits``); return its id and the SDK object.

        Must give up (raise) after about :attr:`create_timeout_s`.
        """

    @abc.abstractmethod
    async def _delete_matching(self, labels: Mapping[str, str], *, sandbox_id: str | None = None) -> int:
        """Delete every sandbox carrying ``labels`` (plus ``sandbox_id``, known to match); return how many."""

    @abc.abstractmethod
    def _delete_now_sync(self, sandbox_id: str) -> None:
        """Delete one sandbox with a plain blocking HTTP call (no event loop: interpreter exit)."""

    @abc.abstractmethod
    def map_error(self, exc: BaseException, *, op: str, sandbox_id: str | None = None) -> SandboxkitError:
        """Translate an SDK / transport error raised during ``op`` into the sandboxkit error tree."""

    @abc.abstractmethod
    async def _attach(self, sandbox_id: str, sdk: Any, limits: Limits) -> CloudSandbox:
        """Wrap a created SDK sandbox (closing it if that fails)."""

    def _create_timed_out(self, exc: BaseException) -> bool:
        """Whether a failed create gave up on time (the SDK's own timeout error counts too)."""
        return isinstance(exc, TimeoutError)

    # ------------------------------------------------------------------ lifecycle

    def _may_have_created(self, exc: BaseException) -> bool:
        """Whether a failed create may still have left a sandbox behind (so it must be looked for).

        A refusal (4xx: credentials, parameters, quota, rate) created nothing; a cancellation,
        a timeout, a reset or a 5xx may have, unless the connection was never even made.
        """
        if not isinstance(exc, Exception):
            return True  # cancelled mid-request
        if never_sent(exc):
            return False
        err = self.map_error(exc, op="create")
        return type(err) is Transient

    async def open(self, limits: Limits | None = None) -> CloudSandbox:
        """Create a labelled sandbox; whatever a failed creation may have left is deleted.

        Raises:
            BackendUnavailable: bad credentials or service URL.
            CapacityExceeded: the account is at its quota / concurrent-sandbox limit (the pool
                lowers its sandbox cap and waits).
            RateLimited: the service said 429 (``retry_after`` set when it said how long).
            Transient: 5xx, a timeout or a connection failure; anything created is deleted.
            InvalidRequest: the service rejected the parameters.
        """
        return await self._open(limits, None)

    async def open_from(self, snapshot: Snapshot, limits: Limits | None = None) -> CloudSandbox:
        """Create a labelled sandbox from a checkpoint taken with the service's snapshot API.

        Raises:
            InvalidRequest: the service cannot fork, or ``snapshot`` is another backend's or released.
            BackendUnavailable, CapacityExceeded, RateLimited, Transient: as :meth:`open`.
        """
        if self.fork_level == "none":
            return await super().open_from(snapshot, limits)  # type: ignore[return-value]
        taken = own_snapshot(snapshot, CloudSnapshot, lambda mine: mine.backend is self, self.name)
        return await self._open(limits, taken.id)

    async def _open(self, limits: Limits | None, source: str | None) -> CloudSandbox:
        limits = limits or Limits()
        token = uuid.uuid4().hex
        labels = {LABEL: "1", INSTANCE_LABEL: self.instance_id, CREATE_LABEL: token}
        try:
            sandbox_id, sdk = await self._create(limits, labels, source)
        except BaseException as exc:
            if self._may_have_created(exc):
                with anyio.CancelScope(shield=True):
                    await self._reap(token, getattr(exc, "sandbox_id", None))
            if self._create_timed_out(exc):
                raise Transient(
                    f"creating a {self.service} sandbox took longer than {self.create_timeout_s:g}s; "
                    f"anything it created was {self.removed}",
                    backend=self.name,
                ) from exc
            if isinstance(exc, Exception):
                raise self.map_error(exc, op="create") from exc
            raise
        self._live.add(sandbox_id)
        self._renewer.ensure_running()
        return await self._attach(sandbox_id, sdk, limits)

    async def _reap(self, token: str, sandbox_id: str | None) -> None:
        """Delete what a failed create may have left: by the id the SDK reported, and by label."""
        found = 0
        with anyio.move_on_after(20):
            try:
                found = await self._delete_matching({CREATE_LABEL: token}, sandbox_id=sandbox_id)
            except Exception as exc:
                log.debug("cleaning up after a failed %s create: %s", self.service, type(exc).__name__)
        if found:
            log.info("%s %d %s sandbox(es) left by a failed create", self.removed, found, self.service)
        else:
            self._pending_tokens.add(token)  # it may still appear: look again at aclose()

    async def cleanup(self) -> int:
        """Delete every sandbox labelled ``sandboxkit=1`` in this account (all runs, not just ours),
        and the checkpoints sandboxkit took there (snapshots named ``sandboxkit-...``).
        """
        try:
            return await self._delete_matching({LABEL: "1"}) + await self._delete_snapshots_matching(SNAPSHOT_PREFIX)
        except Exception as exc:
            raise self.map_error(exc, op="clean up") from exc

    # ------------------------------------------------------------------ checkpoints (optional primitives)

    def snapshot_name(self) -> str:
        """A fresh name for a checkpoint; ``cleanup`` finds leftovers by its prefix."""
        return f"{SNAPSHOT_PREFIX}{self.instance_id}-{uuid.uuid4().hex[:10]}"

    def adopt_snapshot(self, snapshot_id: str) -> CloudSnapshot:
        """The handle of a checkpoint just taken at the service, tracked so the backend can release it."""
        snap = CloudSnapshot(self, snapshot_id)
        self._snapshots.add(snap)
        return snap

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        """Delete one checkpoint at the service (services with ``fork_level != "none"``)."""

    def _delete_snapshot_sync(self, snapshot_id: str) -> None:
        """:meth:`_delete_snapshot` without an event loop (interpreter exit); best effort."""

    async def _delete_snapshots_matching(self, prefix: str) -> int:
        """Delete every checkpoint whose name starts with ``prefix``; return how many (default: none)."""
        return 0

    async def aclose(self) -> None:
        """Release checkpoints still held, delete sandboxes whose close was cut short, sweep failed creates.

        Sandboxes still open are left alone (a sandbox may move to another event loop).
        """
        for snap in list(self._snapshots):
            await snap.release()
        for sandbox_id in list(self._interrupted):
            with anyio.CancelScope(shield=True), anyio.move_on_after(20):
                try:
                    await anyio.to_thread.run_sync(self._delete_now_sync, sandbox_id)
                    self._interrupted.discard(sandbox_id)
                    self._live.discard(sandbox_id)
                except Exception:
                    log.debug("deleting %s sandbox %s at close failed", self.service, sandbox_id, exc_info=True)
        if not self._pending_tokens:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(20):
            for token in list(self._pending_tokens):
                try:
                    await self._delete_matching({CREATE_LABEL: token})
                    self._pending_tokens.discard(token)
                except Exception:
                    log.debug("sweeping a failed %s create failed", self.service, exc_info=True)

    def emergency_cleanup(self) -> None:
        """Delete the sandboxes and checkpoints this object still holds, synchronously (interpreter exit)."""
        for snap in list(self._snapshots):
            snap.release_sync()
        for sandbox_id in list(self._live):
            try:
                self._delete_now_sync(sandbox_id)
                self._live.discard(sandbox_id)
            except Exception:
                log.debug("emergency delete of %s sandbox %s failed", self.service, sandbox_id)
