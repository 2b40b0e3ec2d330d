"""Every documented ``Raises:`` entry of the Sandbox contract has its conformance test.

docs/testing.md ("The conformance suite", ``ContractTests``) promises one test per ``Raises`` entry; this pins the promise
both ways: a new entry in a docstring without a test (or a test named here that was removed)
fails, so the docs and the suite cannot drift apart.
"""

from __future__ import annotations

import inspect
import re

import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.testing import BackendConformance

#: (class, method, error) -> the conformance test that drives a backend into it, or why none can.
COVERED: dict[tuple[str, str, str], str] = {
    ("Sandbox", "run", "InvalidRequest"): "test_run_unsupported_language_is_invalid_request",
    ("Sandbox", "run", "ToolchainMissing"): "per backend: needs a machine without the toolchain",
    ("Sandbox", "run", "SandboxCrashed"): "test_calls_after_close_raise_sandbox_crashed",
    ("Sandbox", "run", "Transient"): "per backend: fault-injection tests (tests/backends/*)",
    ("Sandbox", "run", "RateLimited"): "per backend: fault-injection tests (tests/backends/*)",
    ("Sandbox", "exec", "InvalidRequest"): "test_exec_cwd_escaping_the_workspace_is_invalid_request",
    ("Sandbox", "exec", "SandboxCrashed"): "test_calls_after_close_raise_sandbox_crashed",
    ("Sandbox", "exec", "Transient"): "per backend: fault-injection tests (tests/backends/*)",
    ("Sandbox", "write_files", "InvalidRequest"): "test_bad_paths_are_invalid_requests",
    ("Sandbox", "write_files", "SandboxCrashed"): "test_calls_after_close_raise_sandbox_crashed",
    ("Sandbox", "write_files", "Transient"): "per backend: fault-injection tests (tests/backends/*)",
    ("Sandbox", "read_files", "InvalidRequest"): "test_bad_paths_are_invalid_requests",
    ("Sandbox", "read_files", "SandboxCrashed"): "test_calls_after_close_raise_sandbox_crashed",
    ("Sandbox", "read_files", "Transient"): "per backend: fault-injection tests (tests/backends/*)",
    ("Sandbox", "snapshot", "InvalidRequest"): "test_fork_unsupported_is_invalid_request",
    ("Sandbox", "snapshot", "SandboxCrashed"): "test_snapshot_after_close_raises_sandbox_crashed",
    ("Sandbox", "snapshot", "Transient"): "per backend: fault-injection tests (tests/backends/*)",
    ("Backend", "open_from", "InvalidRequest"): "test_open_from_released_snapshot_is_invalid_request",
    ("Sandbox", "open_kernel", "InvalidRequest"): "test_open_kernel_follows_capabilities",
    ("Sandbox", "open_kernel", "SandboxCrashed"): "test_open_kernel_follows_capabilities",
    ("Backend", "open", "BackendUnavailable"): "per backend: availability tests (tests/backends/*)",
    ("Backend", "open", "CapacityExceeded"): "per backend: quota tests against the cloud fakes",
    ("Backend", "open", "RateLimited"): "per backend: fault-injection tests (tests/backends/*)",
    ("Backend", "open", "Transient"): "per backend: fault-injection tests (tests/backends/*)",
}
#: Extra checks that exec's InvalidRequest covers both documented causes.
ALSO = ("test_exec_non_positive_timeout_is_invalid_request",)


def _documented() -> set[tuple[str, str, str]]:
    found = set()
    for cls in (Sandbox, Backend):
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            doc = inspect.getdoc(fn) or ""
            if "Raises:" not in doc:
                continue
            section = doc.split("Raises:", 1)[1]
            for error in re.findall(r"^    (\w+):", section, re.MULTILINE):
                found.add((cls.__name__, name, error))
    return found


def test_every_raises_entry_is_covered_and_nothing_else() -> None:
    documented = _documented()
    assert documented == set(COVERED), (
        f"undocumented in the map: {sorted(documented - set(COVERED))}; "
        f"no longer documented: {sorted(set(COVERED) - documented)}"
    )


@pytest.mark.parametrize("test_name", sorted({t for t in COVERED.values() if t.startswith("test_")} | set(ALSO)))
def test_named_conformance_tests_exist(test_name: str) -> None:
    assert callable(getattr(BackendConformance, test_name, None)), f"BackendConformance has no {test_name}"
