"""The error tree: kinds, retryability, messages, pickling (Ray ships errors between processes)."""

from __future__ import annotations

import pickle

import sandboxkit.errors as errors
from sandboxkit.errors import InvalidRequest, RateLimited, SandboxError, Transient


def test_hierarchy() -> None:
    assert issubclass(errors.RateLimited, Transient)
    assert issubclass(errors.ToolchainMissing, errors.BackendUnavailable)
    assert issubclass(InvalidRequest, ValueError)
    assert issubclass(errors.BackendNotFound, InvalidRequest)
    retryable = {
        c.__name__ for c in vars(errors).values() if isinstance(c, type) and issubclass(c, SandboxError) and c.retryable
    }
    assert retryable == {"Transient", "RateLimited", "CapacityExceeded"}
    assert issubclass(errors.CapacityExceeded, RateLimited)


def test_a_callers_mistake_is_not_an_infrastructure_failure() -> None:
    # ``except SandboxError`` means "the infrastructure failed: no reward"; a bad request must not land there.
    assert not issubclass(InvalidRequest, SandboxError)
    assert issubclass(InvalidRequest, errors.SandboxkitError)
    assert issubclass(SandboxError, errors.SandboxkitError)
    err = errors.BackendNotFound("no backend 'nope'; pip install sandboxkit[nope]", backend="nope")
    again = pickle.loads(pickle.dumps(err))
    assert (type(again), str(again), again.kind) == (errors.BackendNotFound, str(err), "backend_not_found")


def test_message_names_backend_and_sandbox() -> None:
    err = RateLimited("slow down; retry later", backend="daytona", sandbox_id="sb-1", retry_after=2.5)
    assert str(err) == "[backend=daytona sandbox=sb-1] slow down; retry later"


def test_errors_pickle_with_their_attributes() -> None:
    err = RateLimited("429", backend="e2b", sandbox_id="x", retry_after=1.0)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is RateLimited
    assert (again.backend, again.sandbox_id, again.retry_after, str(again)) == ("e2b", "x", 1.0, str(err))


def test_capacity_exceeded_pickles_with_its_limit() -> None:
    err = errors.CapacityExceeded("Total CPU limit exceeded", backend="daytona", limit=10.0)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is errors.CapacityExceeded
    assert (again.limit, again.retry_after, again.kind) == (10.0, None, "capacity_exceeded")


def test_public_names_are_pinned() -> None:
    import sandboxkit

    pinned = {
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
        "SandboxkitError",
        "RunResult",
        "Sandbox",
        "SandboxCrashed",
        "SandboxError",
        "SandboxPool",
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
    }
    assert set(sandboxkit.__all__) == pinned, "public API changed: update README/docs and this list together"
    assert set(errors.__all__) <= set(sandboxkit.__all__)
    for name in sandboxkit.__all__:
        assert hasattr(sandboxkit, name)
