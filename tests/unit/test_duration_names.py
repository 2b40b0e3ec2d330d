"""Every public duration says its unit (``_s``); the old names still work for one release, with a warning.

Each case calls the new name and the old one against the real object (a subprocess pool, the
server's app, a config) and checks they mean the same; giving both is the caller's mistake.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from sandboxkit import InvalidRequest, SandboxPool, Status
from sandboxkit.configs import SandboxFusionConfig
from sandboxkit.server.app import create_app


def _deprecated(old: str) -> Any:
    return pytest.warns(DeprecationWarning, match=rf"\b{old}= is deprecated; use {old}_s=")


async def test_run_exec_and_python_take_timeout_s_and_warn_on_timeout() -> None:
    async with SandboxPool("subprocess", max_concurrency=2) as pool:
        slow = "import time; time.sleep(5)"
        assert (await pool.run(slow, timeout_s=0.5)).status is Status.TIMEOUT
        with _deprecated("timeout"):
            assert (await pool.run(slow, timeout=0.5)).status is Status.TIMEOUT
        with _deprecated("timeout"):
            assert (await pool.exec("sleep 5", timeout=0.5)).status is Status.TIMEOUT
        assert (await pool.exec("sleep 5", timeout_s=0.5)).status is Status.TIMEOUT
        async with pool.session() as session:
            assert (await session.exec("sleep 5", timeout_s=0.5)).status is Status.TIMEOUT
            with _deprecated("timeout"):
                assert (await session.run(slow, timeout=0.5)).status is Status.TIMEOUT
            cell = await session.python("import time; time.sleep(5)", timeout_s=0.5)
            assert cell.status == "timeout"
            with _deprecated("timeout"):
                await session.python("1", timeout=5)
        with pytest.raises(InvalidRequest, match="timeout_s= only"):
            await pool.run("print(1)", timeout=1, timeout_s=1)


def test_a_new_name_alone_raises_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pool = SandboxPool("subprocess", backoff_base_s=0.5, backoff_max_s=2.0)
        assert (pool.backoff_base_s, pool.backoff_max_s) == (0.5, 2.0)
        assert SandboxFusionConfig(backoff_base_s=0.5).backoff_base_s == 0.5


def test_the_blocking_pools_close_takes_timeout_s() -> None:
    from sandboxkit import SyncSandboxPool

    SyncSandboxPool("subprocess").close(timeout_s=30)
    with _deprecated("timeout"):
        SyncSandboxPool("subprocess").close(timeout=30)


def test_pool_backoffs_keep_their_old_names_for_a_release() -> None:
    with _deprecated("backoff_base"):
        pool = SandboxPool("subprocess", backoff_base=0.5)
    assert pool.backoff_base_s == 0.5
    with _deprecated("backoff_max"):
        assert SandboxPool("subprocess", backoff_max=3.0).backoff_max_s == 3.0


def test_config_old_names_are_accepted_with_a_warning() -> None:
    with _deprecated("backoff_base"):
        config = SandboxFusionConfig(backoff_base=0.5)
    assert config == SandboxFusionConfig(backoff_base_s=0.5)
    with pytest.raises(ValueError, match="backoff_base_s= only"):
        SandboxFusionConfig(backoff_base=0.5, backoff_base_s=0.5)


def test_the_servers_queue_timeout_says_seconds() -> None:
    app = create_app("subprocess", queue_timeout_s=2.5)
    assert app.state.gate.queue_timeout_s == 2.5
    with _deprecated("queue_timeout"):
        old = create_app("subprocess", queue_timeout=2.5)
    assert old.state.gate.queue_timeout_s == 2.5


def test_adapters_take_timeout_s_and_keep_their_old_names_for_a_release() -> None:
    from sandboxkit.integrations.rllm import SandboxEnv
    from sandboxkit.integrations.sglang import CodeInterpreter

    tool = CodeInterpreter("subprocess", timeout_s=3, max_timeout_s=9)
    assert (tool.timeout_s, tool.max_timeout_s) == (3, 9)
    with _deprecated("timeout"):
        assert CodeInterpreter("subprocess", timeout=4).timeout_s == 4
    with _deprecated("max_timeout"):
        assert CodeInterpreter("subprocess", max_timeout=8).max_timeout_s == 8
    with _deprecated("timeout"):
        assert SandboxEnv({}, timeout=6).timeout_s == 6
    with warnings.catch_warnings():  # rLLM's env_args keep their names: no warning from a config
        warnings.simplefilter("error")
        assert SandboxEnv.from_dict({"timeout": 5}).timeout_s == 5
        assert SandboxEnv.from_dict({"step_timeout": 7}).timeout_s == 7


def test_the_fake_backends_delays_say_seconds() -> None:
    from sandboxkit.testing import FakeBackend

    assert FakeBackend(open_delay_s=0.5).open_delay_s == 0.5
    with _deprecated("close_delay"):
        assert FakeBackend(close_delay=0.25).close_delay_s == 0.25
