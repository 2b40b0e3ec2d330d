"""rLLM: SandboxEnv episodes as rLLM's engine drives them, and the rllm.sandbox.protocol.Sandbox object."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from sandboxkit.integrations.rllm import TOOLS, BaseEnv, RLLMSandbox, SandboxEnv
from support.integrations import descendant_processes, docker_backend_present, docker_engine_up
from support.marks import requires

POOL = {"max_concurrency": 64, "max_sandboxes": 128}

TASK = {
    "problem_statement": "Write /testbed/solution.py that prints the sum of two integers read from stdin.",
    "files": {"/testbed/README.md": "sum two numbers\n"},
    "tests": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]},
    "solution_path": "/testbed/solution.py",
}

BACKENDS = [
    pytest.param("subprocess", id="subprocess"),
    pytest.param(
        "docker",
        id="docker",
        marks=[
            pytest.mark.docker,
            requires(docker_backend_present(), "the docker backend module is not in this checkout yet"),
            requires(docker_engine_up(), "no Docker engine"),
        ],
    ),
]


@dataclass
class Action:
    """Shaped like rLLM's ``rllm.agents.agent.Action``: the engine passes ``.action`` objects to ``step``."""

    action: Any


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def run_episode(backend: str, env_args: dict[str, Any] | None = None) -> tuple[list[tuple], float, SandboxEnv]:
    """One episode the way rLLM's AgentExecutionEngine runs it: from_dict, reset, steps, final reward, close."""
    env = SandboxEnv.from_dict({**TASK, "backend": backend, "pool_options": POOL, **(env_args or {})})
    steps = []
    try:
        observation, info = env.reset()
        assert "sum of two integers" in observation and not info.get("infra_error"), info
        steps.append(env.step(call("str_replace_editor", command="view", path="/testbed/README.md")))
        steps.append(
            env.step(
                call(
                    "str_replace_editor",
                    command="create",
                    path="/testbed/solution.py",
                    file_text="a, b = map(int, input().split())\nprint(a - b)\n",
                )
            )
        )
        steps.append(env.step(Action(call("execute_bash", command="cd /testbed && echo 1 2 | python3 solution.py"))))
        steps.append(
            env.step(
                json.dumps(
                    {
                        "name": "str_replace_editor",
                        "arguments": json.dumps(
                            {"command": "str_replace", "path": "solution.py", "old_str": "a - b", "new_str": "a + b"}
                        ),
                    }
                )
            )
        )
        steps.append(env.step(call("execute_bash", command="echo 1 2 | python3 /testbed/solution.py && pwd")))
        steps.append(env.step([call("submit")]))
        final = env.compute_final_reward()
    finally:
        env.close()
    return steps, final, env


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_episode(backend: str) -> None:
    steps, final, env = run_episode(backend)
    view, create, run1, edit, run2, submit = steps
    assert "sum two numbers" in view[0] and view[2] is False
    assert create[0] == "File created successfully at: /testbed/solution.py"
    assert run1[0].strip() == "-1" and run1[1:3] == (0.0, False)
    assert "print(a + b)" in edit[0]
    # The model sees the advertised layout whatever the backend's real workspace is.
    assert run2[0].split() == ["3", "/testbed"]
    assert submit[1] == 1.0 and submit[2] is True and submit[3]["infra_error"] is False
    assert final == 1.0
    assert env.final_info["reward_status"] == "ok"
    pool = env.handle.pool.pool
    env.handle.close()
    assert pool.open_sandboxes == 0
    if backend == "docker":  # and no container of this process is left running
        ps = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=sandboxkit.host_pid={os.getpid()}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert ps.returncode == 0 and ps.stdout.strip() == ""


def test_malformed_actions_get_error_observations() -> None:
    env = SandboxEnv.from_dict({**TASK, "pool_options": POOL})
    try:
        env.reset()
        cases = [
            ("I think I am done", "No tool call"),
            ({"name": "execute_bash", "arguments": "{not json"}, "not valid JSON"),
            ({"arguments": {}}, "no 'name'"),
            (call("str_replace_editor", command="view", path="/etc/passwd"), "outside the working directory"),
            (call("str_replace_editor", command="str_replace", path="README.md", old_str="zzz"), "did not appear"),
            (
                call("str_replace_editor", command="insert", path="README.md", insert_line=99, new_str="x"),
                "out of bounds",
            ),
            (call("str_replace_editor", command="delete", path="README.md"), "unknown command"),
            (call("launch_missiles"), "unknown tool"),
            (42, "unsupported action"),
        ]
        for action, fragment in cases:
            observation, reward, done, _ = env.step(action)
            assert fragment in observation, (action, observation)
            assert (reward, done) == (0.0, False)
        observation, _, _, _ = env.step(call("str_replace_editor", command="view", path="/testbed"))
        assert "/testbed/README.md" in observation
        observation, _, _, _ = env.step(
            call("str_replace_editor", command="insert", path="/testbed/README.md", insert_line=0, new_str="# title")
        )
        assert "1\t# title" in observation
    finally:
        env.close()


def test_reset_releases_the_previous_sandbox_and_close_is_idempotent() -> None:
    env = SandboxEnv.from_dict({**TASK, "pool_options": POOL})
    pool = env.handle.pool.pool
    env.reset()
    env.step(call("str_replace_editor", command="create", path="leftover.txt", file_text="x"))
    env.reset()  # a fresh sandbox: the previous one was released, its files are gone
    observation, *_ = env.step(call("execute_bash", command="ls"))
    assert "leftover.txt" not in observation and "README.md" in observation
    env.close()
    env.close()
    assert pool.open_sandboxes == pool.metrics()["sandboxes_idle"]  # nothing held by an episode any more


def test_64_episodes_from_a_64_thread_pool_leave_nothing_behind() -> None:
    before = descendant_processes()
    handle = SandboxEnv.from_dict({**TASK, "backend": "subprocess", "pool_options": POOL}).handle  # the episodes' pool
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as executor:  # as rLLM's engine runs envs
        results = list(executor.map(lambda _: run_episode("subprocess")[:2], range(64)))
    assert all(final == 1.0 for _, final in results)
    assert all(steps[-1][2] is True for steps, _ in results)
    pool = handle.pool.pool
    assert pool.open_sandboxes == pool.metrics()["sandboxes_idle"]  # every episode gave its sandbox back
    handle.close()
    assert pool.open_sandboxes == 0
    assert descendant_processes() <= before


def test_backend_down_ends_the_episode_cleanly(down_backend) -> None:
    env = SandboxEnv(TASK, backend=down_backend)
    observation, info = env.reset()
    assert observation == TASK["problem_statement"]
    assert info["infra_error"] is True and "unreachable" in info["error"]
    observation, reward, done, info = env.step(call("execute_bash", command="ls"))
    assert done is True and reward == 0.0 and info["infra_error"] is True
    assert observation.startswith("Error: the sandbox is unavailable")
    env.close()
    assert down_backend.opens >= 1


def test_reward_command_and_reset_with_a_new_task() -> None:
    env = SandboxEnv(pool_options=POOL)
    try:
        env.reset(task={"question": "make ok.txt", "reward_command": "test -f /testbed/ok.txt"})
        assert env.step(call("submit"))[1] == 0.0
        env.reset(task={"question": "make ok.txt", "reward_command": "test -f /testbed/ok.txt"})
        env.step(call("execute_bash", command="touch /testbed/ok.txt"))
        assert env.step(call("submit"))[1:3] == (1.0, True)
    finally:
        env.close()


def test_contract_surface() -> None:
    assert isinstance(SandboxEnv(TASK), BaseEnv)
    assert SandboxEnv.is_multithread_safe() is True
    assert {t["function"]["name"] for t in TOOLS} == {"execute_bash", "str_replace_editor", "submit"}
    env = SandboxEnv.from_dict(json.dumps({**TASK, "workdir": "/work", "timeout": 5}))
    assert env.workspace.workdir == "/work" and env.timeout_s == 5 and "workdir" not in env.task


def test_rllm_sandbox_protocol(tmp_path) -> None:
    local = tmp_path / "proj"
    (local / "pkg").mkdir(parents=True)
    (local / "pkg" / "mod.py").write_text("VALUE = 41\n")
    single = tmp_path / "run.py"
    single.write_text("from pkg.mod import VALUE\nprint(VALUE + 1)\n")
    sandbox = RLLMSandbox("t1", "subprocess", pool_options=POOL)
    try:
        assert sandbox.is_alive()
        sandbox.upload_dir(str(local), "/app/proj")
        sandbox.upload_file(str(single), "/app/proj/run.py")
        assert sandbox.exec("cd /app/proj && python3 run.py").strip() == "42"
        sandbox.exec("echo out > /app/result.txt")
        assert sandbox.download_file("/app/result.txt") == b"out\n"
        with pytest.raises(FileNotFoundError):
            sandbox.download_file("/app/missing.txt")
        with pytest.raises(RuntimeError, match="exit 3"):
            sandbox.exec("echo boom >&2; exit 3")
    finally:
        sandbox.close()
    assert sandbox.is_alive() is False
    sandbox.close()  # idempotent


@pytest.mark.skipif(os.environ.get("SANDBOXKIT_SKIP_SLOW") == "1", reason="slow tests disabled")
def test_rllm_sandbox_methods_match_rllm_protocol() -> None:
    # rLLM's runtime_checkable Protocol (rllm/sandbox/protocol.py) checks these names; rLLM is not on PyPI.
    for name in ("exec", "upload_file", "upload_dir", "download_file", "close", "is_alive"):
        assert callable(getattr(RLLMSandbox, name))


def test_fork_from_checkpoint_prepares_each_task_once() -> None:
    # GRPO's N rollouts of one prompt: the task is prepared once (files + setup_command) and every
    # episode forks from that checkpoint; a second task gets its own.
    args = {"fork_from_checkpoint": True, "setup_command": "od -An -N8 -tx1 /dev/urandom > .token"}
    steps, final, env = run_episode("subprocess", args)
    assert final == 1.0, steps
    envs = [SandboxEnv.from_dict({**TASK, "backend": "subprocess", "pool_options": POOL, **args}) for _ in range(3)]
    other = SandboxEnv.from_dict({**TASK, "files": {"/testbed/README.md": "other\n"}, "pool_options": POOL, **args})
    try:
        infos = [e.reset()[1] for e in [*envs, other]]
        assert all(i.get("forked_from") for i in infos), infos
        tokens = [e.step(call("execute_bash", command="cat .token"))[0] for e in [*envs, other]]
        assert len(set(tokens[:3])) == 1 and tokens[3] != tokens[0], tokens
        envs[0].step(call("execute_bash", command="echo mine > README.md"))
        readmes = [e.step(call("execute_bash", command="cat README.md"))[0] for e in envs]
        assert "mine" in readmes[0] and all("sum two numbers" in r for r in readmes[1:]), readmes
    finally:
        for e in [*envs, other]:
            e.close()
    metrics = env.handle.pool.metrics()
    assert metrics["checkpoints_taken"] >= 2 and metrics["forks"] >= 5


def test_stateful_python_episode() -> None:
    env = SandboxEnv.from_dict({**TASK, "backend": "subprocess", "stateful_python": True, "pool_options": POOL})
    try:
        assert [t["function"]["name"] for t in env.tools][-1] == "code_interpreter"
        assert "code_interpreter" not in [t["function"]["name"] for t in SandboxEnv(TASK).tools]
        env.reset()

        def call(code: str) -> str:
            action = {"name": "code_interpreter", "arguments": {"code": code}}
            observation, _, done, _ = env.step(f"<tool_call>{json.dumps(action)}</tool_call>")
            assert not done
            return observation

        assert call("notes = open('README.md').read().split()\nlen(notes)") == "3"
        assert call("notes.append('more')\nprint(' '.join(notes))") == "sum two numbers more"
        assert call("notes[-1]") == "'more'"
        assert "non-empty 'code'" in call("")
    finally:
        env.close()
