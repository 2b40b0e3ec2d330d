"""Errors sandboxkit raises: the caller's mistakes and infrastructure failures, as siblings.

The hierarchy::

    SandboxkitError               base of everything sandboxkit raises (catch it to catch both kinds)
    ├── InvalidRequest            the caller's mistake (unknown language, bad path, bad limit); not retried
    │   └── BackendNotFound       no installed backend has that name
    └── SandboxError              the sandbox infrastructure failed; never the model's own failure
        ├── BackendUnavailable        the backend cannot serve here (SDK missing, engine down, no API key)
        │   └── ToolchainMissing      the language's compiler or interpreter is not installed
        ├── SandboxCrashed            the sandbox died or vanished mid-call; it is discarded, not retried
        ├── Transient                 a passing fault (5xx, reset, timeout talking to the service); retried
        │   └── RateLimited           the service said 429; retried after ``retry_after``
        │       └── CapacityExceeded  the account is at its concurrent-sandbox / quota limit; the pool
        │                             lowers its sandbox cap and waits for one to close (until the deadline)
        ├── DeadlineExceeded          the pool's per-call deadline passed (queue wait + retries included)
        └── PoolClosed                the pool was closed before or during the call

Why siblings: ``except SandboxError`` reads as "the infrastructure failed, give no reward".
When ``InvalidRequest`` was a ``SandboxError`` every such handler had to catch it first, and
one that forgot scored a bad request as an infrastructure failure.

A program that exits non-zero, times out or runs out of memory is *data* in a
:class:`~sandboxkit.models.RunResult`, never one of these. Adapters rely on that split
to give "no reward" for infrastructure failures instead of a wrong low reward.

Every message names the backend (and the sandbox id when there is one), shows the bad
value with ``!r`` and ends with what to do next. Messages never contain credentials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import TypedDict, Unpack

    class _RateLimitedContext(TypedDict, total=False):
        """The keywords :class:`RateLimited` takes besides the message (for its subclasses' ``**``)."""

        backend: str | None
        sandbox_id: str | None
        retry_after: float | None


__all__ = [
    "BackendNotFound",
    "BackendUnavailable",
    "CapacityExceeded",
    "DeadlineExceeded",
    "InvalidRequest",
    "PoolClosed",
    "RateLimited",
    "SandboxCrashed",
    "SandboxError",
    "SandboxkitError",
    "ToolchainMissing",
    "Transient",
]


class SandboxkitError(Exception):
    """Base of every error sandboxkit raises: :class:`InvalidRequest` and :class:`SandboxError`.

    Attributes:
        backend: name of the backend involved, if known.
        sandbox_id: id of the sandbox involved, if any.
    """

    #: Short machine-readable kind, used in metrics and adapter payloads.
    kind: str = "sandboxkit_error"
    #: Whether the pool may retry the call that raised it.
    retryable: bool = False

    def __init__(self, message: str, *, backend: str | None = None, sandbox_id: str | None = None) -> None:
        self.message = message
        self.backend = backend
        self.sandbox_id = sandbox_id
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.backend:
            where.append(f"backend={self.backend}")
        if self.sandbox_id:
            where.append(f"sandbox={self.sandbox_id}")
        prefix = f"[{' '.join(where)}] " if where else ""
        return prefix + self.message

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keep errors picklable (Ray ships them across processes) with their attributes.
        return (_rebuild, (type(self), self.message, self.backend, self.sandbox_id, dict(self.__dict__)))


def _rebuild(
    cls: type[SandboxkitError], message: str, backend: str | None, sandbox_id: str | None, state: dict[str, object]
) -> SandboxkitError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    err.message, err.backend, err.sandbox_id = message, backend, sandbox_id
    return err


class SandboxError(SandboxkitError):
    """Base of every infrastructure error: the sandbox machinery failed, not the caller or the program."""

    kind = "sandbox_error"


class InvalidRequest(SandboxkitError, ValueError):
    """The request itself is wrong (unknown language, negative timeout, path outside the sandbox).

    Retrying cannot help; fix the request. Not a :class:`SandboxError` (nothing failed);
    subclasses :class:`ValueError` so generic validation code can catch it.
    """

    kind = "invalid_request"


class BackendNotFound(InvalidRequest):
    """No installed backend answers to the requested name."""

    kind = "backend_not_found"


class BackendUnavailable(SandboxError):
    """The backend cannot work on this machine or right now (missing extra, engine down, no key)."""

    kind = "backend_unavailable"


class ToolchainMissing(BackendUnavailable):
    """The compiler or interpreter a language needs is not installed where the code runs."""

    kind = "toolchain_missing"


class SandboxCrashed(SandboxError):
    """The sandbox died or disappeared during a call.

    The pool discards that sandbox and does not retry the call: the code that was running
    may itself have caused the crash, and running it again could crash the next sandbox too.
    """

    kind = "sandbox_crashed"


class SandboxLost(SandboxCrashed):
    """The sandbox was found dead before the call sent it anything: nothing of the call ran.

    It died between two tenants (say, during the state check after the last tenant's command,
    which a reset does not wait for). A pool discards it and runs the call on another sandbox
    without counting a retry, as it does for a sandbox found dead on lease; outside a pool it is
    a ``SandboxCrashed`` like any other.
    """


class Transient(SandboxError):
    """A passing infrastructure fault (5xx, connection reset, a stall). The pool retries it."""

    kind = "transient"
    retryable = True


class RateLimited(Transient):
    """The service refused the call for now (HTTP 429 or an explicit quota answer).

    Attributes:
        retry_after: seconds the service asked us to wait, if it said.
    """

    kind = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        backend: str | None = None,
        sandbox_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, backend=backend, sandbox_id=sandbox_id)
        self.retry_after = retry_after


class CapacityExceeded(RateLimited):
    """The service refused to create another sandbox because the account is at its limit.

    Daytona's organisation vCPU/memory quota ("Total CPU limit exceeded"), E2B's and Daytona's
    "maximum number of concurrent sandboxes" 429s. Unlike a plain 429 this is not about *rate*:
    waiting helps only once one of our own sandboxes closes. The pool therefore learns the
    service's effective concurrency from it (it lowers its sandbox cap, then grows it back
    slowly after successes) and queues the call behind that cap until the call's deadline,
    instead of failing it after a few quick retries.

    Attributes:
        limit: the limit the service named in its answer, if it did (e.g. vCPUs), else ``None``.
    """

    kind = "capacity_exceeded"

    def __init__(self, message: str, *, limit: float | None = None, **context: Unpack[_RateLimitedContext]) -> None:
        # The other keywords are exactly RateLimited's (typed by _RateLimitedContext), not a copy of them.
        super().__init__(message, **context)
        self.limit = limit


class DeadlineExceeded(SandboxError):
    """The pool's deadline for the whole call (queue wait, runs and retries) passed."""

    kind = "deadline_exceeded"


class PoolClosed(SandboxError):
    """The pool was closed before or while the call ran; open a new pool."""

    kind = "pool_closed"
