"""sandboxkit: run untrusted, model-written code safely and fast, from any RL trainer.

One :class:`Sandbox` contract, pluggable backends found by name, one :class:`SandboxPool`
with caps, rate limits, retries and cleanup, and thin adapters for TRL, verl, SGLang and rLLM.
"""

from sandboxkit.base import Availability, Backend, Capabilities, Sandbox, Snapshot
from sandboxkit.checkpoint import Checkpoint
from sandboxkit.errors import (
    BackendNotFound,
    BackendUnavailable,
    CapacityExceeded,
    DeadlineExceeded,
    InvalidRequest,
    PoolClosed,
    RateLimited,
    SandboxCrashed,
    SandboxError,
    SandboxkitError,
    ToolchainMissing,
    Transient,
)
from sandboxkit.hookspecs import hookimpl
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.registry import BackendSpec, available_backends, backend
from sandboxkit.session import Session
from sandboxkit.sync import SyncCheckpoint, SyncSandboxPool, SyncSession

__version__ = "0.1.0"

__all__ = [
    "Availability",
    "Backend",
    "BackendNotFound",
    "BackendSpec",
    "BackendUnavailable",
    "Capabilities",
    "CapacityExceeded",
    "Checkpoint",
    "DeadlineExceeded",
    "ExecResult",
    "InvalidRequest",
    "Limits",
    "PoolClosed",
    "RateLimited",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "SandboxCrashed",
    "SandboxError",
    "SandboxPool",
    "SandboxkitError",
    "Session",
    "Snapshot",
    "Status",
    "SyncCheckpoint",
    "SyncSandboxPool",
    "SyncSession",
    "ToolchainMissing",
    "Transient",
    "__version__",
    "available_backends",
    "backend",
    "hookimpl",
]
