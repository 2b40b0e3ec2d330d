"""``harbor run`` (Harbor's own runner) on sandboxkit's environment provider, on Docker and subprocess+rootfs.

Harbor needs Python >= 3.12, so it lives in a venv of its own (``.venv-harbor``, made by
``scripts/harbor-venv.sh``, which ``bootstrap.sh --all`` runs); these tests call its ``harbor`` CLI as a subprocess,
exactly as a user would, on two small tasks of ours in ``data/harbor_tasks`` (a prebuilt-image
task with ``reward.txt`` and a Dockerfile task with ``reward.json``). Agents: Harbor's
``oracle`` (runs ``solution/solve.sh``) and ``nop``, and hostile ones from
``data/harbor_agents/sandboxkit_test_agents.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.integrations import docker_engine_up
from support.marks import missing, requires

REPO = Path(__file__).resolve().parents[2]
HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"
DATA = Path(__file__).parent / "data"
TASKS = DATA / "harbor_tasks"
PROVIDER = "sandboxkit.integrations.harbor_environment:SandboxkitEnvironment"
#: The images the tasks are built on (scripts/docker-test-images.sh): bash and coreutils, no Python.
TASK_IMAGE = "sandboxkit-nopython:latest"

pytestmark = [pytest.mark.docker, requires(docker_engine_up(), "no Docker engine")]


@pytest.fixture(scope="module")
def harbor() -> Path:
    """The venv's ``harbor`` CLI, and the image the tasks are built on."""
    if not HARBOR.exists():
        missing(
            f"no Harbor venv at {HARBOR.parent.parent}: bash scripts/bootstrap.sh --all makes it "
            "(scripts/harbor-venv.sh), where a Python >= 3.12 is installed (pyenv install 3.12)"
        )
    if subprocess.run(["docker", "image", "inspect", TASK_IMAGE], capture_output=True).returncode != 0:
        missing(f"no {TASK_IMAGE} image (scripts/docker-test-images.sh builds it)")
    return HARBOR


def harbor_run(harbor: Path, jobs: Path, agent: str, *options: str, tasks: Path = TASKS) -> dict[str, dict[str, Any]]:
    """Run ``harbor run`` on ``tasks`` through the provider; returns each trial's result.json by task name."""
    env = {
        **os.environ,
        # The worktree's sandboxkit and the test agents, whatever the venv has installed.
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(DATA / "harbor_agents")]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch of a price list nobody uses here
    }
    command = [str(harbor), "run", "-p", str(tasks), "-a", agent, "--env", PROVIDER, *options]
    command += ["-n", "2", "-o", str(jobs), "--job-name", "job", "-y", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    results = {}
    for path in (jobs / "job").glob("*/result.json"):
        result = json.loads(path.read_text())
        results[result["task_name"]] = result
    assert results, (
        f"harbor wrote no trial results (exit {done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    return results


def rewards(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Reward per task (``None``: no verdict); a trial with an exception must have none."""
    out: dict[str, float | None] = {}
    for name, result in results.items():
        verdict = result.get("verifier_result")
        out[name] = float(verdict["rewards"]["reward"]) if verdict else None
    return out


def exceptions(results: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    return {name: (r.get("exception_info") or {}).get("exception_type") for name, r in results.items()}


BACKENDS = [
    pytest.param(["--ek", "backend=docker"], id="docker"),
    pytest.param(["--ek", "backend=subprocess"], id="subprocess-rootfs"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_oracle_scores_1_and_nop_scores_0_on_both_tasks(harbor: Path, tmp_path: Path, backend: list[str]) -> None:
    solved = harbor_run(harbor, tmp_path / "oracle", "oracle", *backend)
    assert rewards(solved) == {"answer": 1.0, "fix-fib": 1.0}, exceptions(solved)
    assert exceptions(solved) == {"answer": None, "fix-fib": None}
    idle = harbor_run(harbor, tmp_path / "nop", "nop", *backend)
    assert rewards(idle) == {"answer": 0.0, "fix-fib": 0.0}, exceptions(idle)
    assert exceptions(idle) == {"answer": None, "fix-fib": None}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_that_forges_the_verdict_scores_0(harbor: Path, tmp_path: Path, backend: list[str]) -> None:
    """Planted reward files and a ``cat`` shadowed on PATH: the verifier runs in a fresh sandbox, so 0.

    Before the verifier moved out of the agent's sandbox this scored 1.0 on subprocess+rootfs,
    where the agent is root in its image (``--ek verifier=shared`` still shows it).
    """
    results = harbor_run(harbor, tmp_path, "sandboxkit_test_agents:ForgingAgent", *backend)
    assert rewards(results) == {"answer": 0.0, "fix-fib": 0.0}, exceptions(results)


def test_the_shared_verifier_is_what_the_forging_agent_beats(harbor: Path, tmp_path: Path) -> None:
    """The same attack with Harbor's own arrangement (verifier in the agent's sandbox): it wins, so the
    test above can fail, and ``verifier=shared`` is documented as for trusted agents only."""
    options = ["--ek", "backend=subprocess", "--ek", "verifier=shared", "-i", "answer"]
    results = harbor_run(harbor, tmp_path, "sandboxkit_test_agents:ForgingAgent", *options)
    assert rewards(results) == {"answer": 1.0}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_past_its_timeout_is_graded_on_what_it_left(harbor: Path, tmp_path: Path, backend: list[str]) -> None:
    """It solves, then a command runs past Harbor's agent timeout (6 s here): Harbor records AgentTimeoutError
    and grades the state, as its own providers do. Cancelling the command used to discard the sandbox, so
    the verifier saw an untouched image and this scored 0.0."""
    options = [*backend, "--agent-timeout-multiplier", "0.05", "-i", "answer"]
    results = harbor_run(harbor, tmp_path, "sandboxkit_test_agents:SolvesThenHangsAgent", *options)
    assert rewards(results) == {"answer": 1.0}
    assert exceptions(results) == {"answer": "AgentTimeoutError"}


def test_a_sandbox_killed_from_outside_is_harbors_error_not_a_reward(harbor: Path, tmp_path: Path) -> None:
    """``docker kill`` during the agent's command: the trial has Harbor's exception and no reward (not 0, not 1)."""
    options = ["--ek", "backend=docker", "-i", "answer"]
    results = harbor_run(harbor, tmp_path, "sandboxkit_test_agents:KilledFromOutsideAgent", *options)
    assert rewards(results) == {"answer": None}
    assert exceptions(results) == {"answer": "SandboxkitEnvironmentError"}


def test_a_sandbox_that_cannot_start_is_harbors_error(harbor: Path, tmp_path: Path) -> None:
    """A root filesystem that is not there: no sandbox, so Harbor's exception and no reward."""
    options = ["--ek", "backend=subprocess", "--ek", f"rootfs={tmp_path / 'no-such-rootfs.tar'}", "-i", "answer"]
    results = harbor_run(harbor, tmp_path, "oracle", *options)
    assert rewards(results) == {"answer": None}
    assert exceptions(results) == {"answer": "SandboxkitEnvironmentError"}
