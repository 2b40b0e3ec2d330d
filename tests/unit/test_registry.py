"""Backend discovery through entry points, exactly as a third-party plugin is found."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import BackendNotFound, BackendUnavailable, SandboxPool, Status
from sandboxkit.registry import BackendSpec, available_backends
from support.plugin_dist import ECHO_PLUGIN, on_sys_path, pip_install_target


@pytest.fixture(scope="module")
def echo_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The echo plugin, pip-installed into a temporary site directory visible to this module only."""
    target = tmp_path_factory.mktemp("echo-plugin") / "site"
    pip_install_target(ECHO_PLUGIN, target)
    with on_sys_path(target, "sandboxkit_echo_plugin"):
        yield target


def test_builtin_backends_register_through_entry_points() -> None:
    specs = available_backends()
    for name in ("subprocess", "docker", "sandbox_fusion", "daytona", "e2b"):
        assert name in specs
        assert specs[name].plugin == name, "built-ins are loaded from their own entry point"


def test_third_party_plugin_distribution_is_found_by_name(echo_plugin: Path) -> None:
    # tests/plugin/sandboxkit-echo-plugin, pip-installed into a temporary target by the fixture.
    spec = available_backends()["echo"]
    assert spec.plugin == "echo"
    backend = sandboxkit.backend("echo")
    assert type(backend).__module__ == "sandboxkit_echo_plugin.backend"
    loaded_from = Path(sys.modules["sandboxkit_echo_plugin"].__file__ or "")
    assert loaded_from.is_relative_to(echo_plugin), f"the plugin came from {loaded_from}, not the installed copy"


@pytest.mark.usefixtures("echo_plugin")
async def test_plugin_backend_serves_a_pool() -> None:
    async with SandboxPool("echo") as pool:
        result = await pool.run("print(1)")
    assert result.status is Status.OK and result.stdout == "print(1)"


@pytest.mark.usefixtures("echo_plugin")
def test_unknown_name_lists_installed_backends() -> None:
    with pytest.raises(BackendNotFound) as info:
        sandboxkit.backend("dokcer")
    message = str(info.value)
    assert "'dokcer'" in message and "docker" in message and "subprocess" in message and "echo" in message


def test_missing_extra_names_the_pip_command() -> None:
    spec = BackendSpec(name="ghost", factory="ghost_sdk_backend:Ghost", extra="ghost", modules=("ghost_sdk_xyz",))
    with pytest.raises(BackendUnavailable, match=r'pip install "sandboxkit\[ghost\]"'):
        spec.load()
    avail = spec.availability()
    assert not avail.usable and "ghost_sdk_xyz" in avail.reason


@pytest.mark.usefixtures("echo_plugin")
def test_options_rejected_by_the_backend_are_invalid_requests() -> None:
    with pytest.raises(sandboxkit.InvalidRequest, match="rejected its options"):
        sandboxkit.backend("echo", no_such_option=1)
