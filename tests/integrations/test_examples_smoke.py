"""The examples' fast modes, run in-process (CI also runs them as scripts: see each file's docstring)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rllm_example_fast() -> None:
    rewards = load(EXAMPLES / "rllm_env.py").main(["--fast"])
    assert rewards == [1.0] * 4


def test_verl_example_smoke(capsys) -> None:
    pytest.importorskip("verl")
    assert load(EXAMPLES / "verl" / "smoke.py").main() == 0
    assert "tool call 2: written by call 1" in capsys.readouterr().out


def test_trl_example_tiny(monkeypatch) -> None:
    pytest.importorskip("trl")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    last = load(EXAMPLES / "trl_grpo.py").main(["--tiny", "--steps", "1"])
    assert "rewards/sandbox_pass_rate/mean" in last
    assert last.get("sandbox_pass_rate/infra_failure_rate") == 0.0


def test_agent_tasks_example() -> None:
    pytest.importorskip("math_verify")
    assert load(EXAMPLES / "agent_tasks.py").main([]) == {"right": 1.0, "wrong": 0.0}
