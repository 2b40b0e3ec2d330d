"""LLM-in-Sandbox-RL end to end: its rows, its layout, its agent's actions and its reward rules on sandboxkit.

The actions are built with llm-in-sandbox's own ``Action`` class (PyPI ``llm-in-sandbox``), wrapped
the way LLM-in-Sandbox-RL's ``LLMinSandboxAgent.update_from_model`` wraps them (rLLM's
``Action(action=...)``; rLLM itself is installed from git only, so a same-shaped dataclass stands
in when it is absent). The reward rules are checked against llm-in-sandbox's own reward function.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandboxkit.backends.subprocess._isolation import probe
from sandboxkit.backends.subprocess._rootfs import has_overlay_mounts
from sandboxkit.integrations._llm_in_sandbox import Layout, input_files, score_answer
from sandboxkit.integrations._math_worker import (
    MathScore,
    MathWorker,
    MathWorkerError,
    _cpu_seconds,
    shutdown_math_worker,
)
from sandboxkit.integrations.rllm import TOOLS, SandboxEnv
from support.integrations import descendant_processes, docker_backend_present, docker_engine_up
from support.marks import missing, requires
from support.rootfs import CACHE, base_image_tarball

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # llm-in-sandbox imports litellm: no network fetch
lis = pytest.importorskip("llm_in_sandbox", reason="llm-in-sandbox is not installed (pip install llm-in-sandbox)")
pytest.importorskip("math_verify", reason="math-verify is not installed (pip install 'sandboxkit[rllm]')")

POOL = {"max_concurrency": 64, "max_sandboxes": 128}

try:  # the agent hands rLLM's Action(action=llm_in_sandbox.Action(...)) to the engine
    from rllm.agents.agent import Action as RLLMAction  # type: ignore[import-not-found]
except ImportError:

    @dataclass
    class RLLMAction:  # type: ignore[no-redef]
        """Shaped like ``rllm.agents.agent.Action``."""

        action: Any = None


def act(function_name: str = "", **parameters: Any) -> RLLMAction:
    """What ``LLMinSandboxAgent.update_from_model`` returns for a turn ("" = the model made no tool call)."""
    return RLLMAction(action=lis.Action(function_name, parameters))


def row(ground_truth: str = "12", domain: str = "math", **extra: Any) -> dict[str, Any]:
    """A row as LLM-in-Sandbox-RL's dataset converter writes it (input_files as JSON text)."""
    return {
        "id": "sum-0",
        "domain": domain,
        "problem_statement": "Add up the numbers in /testbed/documents/nums.txt; write the sum to /testbed/answer.txt.",
        "ground_truth": ground_truth,
        "input_files": json.dumps({"nums.txt": "3\n4\n5\n", "notes/readme.md": "one number per line\n", "gone": None}),
        **extra,
    }


def rootfs_options() -> dict[str, Any] | None:
    """Subprocess backend options for the project's base image as a root filesystem (None: not possible here)."""
    if os.geteuid() != 0:
        return None
    tarball = base_image_tarball()
    return None if tarball is None else {"rootfs": tarball, "rootfs_cache": CACHE, "root": ROOTFS_ROOT}


#: A workspace root of this module's own, so overlay mounts counted there are this module's.
ROOTFS_ROOT = os.path.join(tempfile.gettempdir(), f"sandboxkit-test-agents-p{os.getpid()}")

BACKENDS = [
    pytest.param({"backend": "subprocess"}, id="subprocess"),
    pytest.param(
        {"backend": "subprocess", "rootfs": True},
        id="subprocess-rootfs",
        marks=[
            pytest.mark.docker,  # the base image is exported from Docker
            requires(os.geteuid() == 0, "rootfs sandboxes mount an overlay per sandbox: root only"),
            requires(docker_engine_up(), "no Docker engine to export the base image from"),
        ],
    ),
    pytest.param(
        {"backend": "docker"},
        id="docker",
        marks=[
            pytest.mark.docker,
            requires(docker_backend_present(), "the docker backend module is not in this checkout"),
            requires(docker_engine_up(), "no Docker engine"),
        ],
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _remove_rootfs_root() -> Iterator[None]:
    yield
    shutil.rmtree(ROOTFS_ROOT, ignore_errors=True)


def env_args(backend: dict[str, Any]) -> dict[str, Any]:
    """SandboxEnv arguments for a BACKENDS entry."""
    if not backend.get("rootfs"):
        return dict(backend)
    options = rootfs_options()
    if options is None:
        missing("no root filesystem image here")
    return {"backend": "subprocess", "backend_options": options}


def episode(
    backend: dict[str, Any], answer_command: str, task: dict[str, Any] | None = None
) -> tuple[list[tuple], SandboxEnv]:
    """One scripted episode the way rLLM's engine runs it: from_dict, reset, steps, final reward, close."""
    task = task or row()
    env = SandboxEnv.from_dict({**task, **env_args(backend), "pool_options": POOL})
    steps: list[tuple] = []
    try:
        observation, info = env.reset()
        assert info["extra_info"] == task and "nums.txt" in observation, info
        steps.append(env.step(act()))  # a turn without a tool call
        steps.append(env.step(act("execute_bash", command="ls /testbed/documents; cat /testbed/documents/nums.txt")))
        steps.append(env.step(act("execute_bash", command=answer_command)))
        steps.append(env.step(act("submit")))
        steps.append((env.compute_final_reward(),))
    finally:
        env.close()
    return steps, env


RIGHT = "python3 -c \"print(sum(int(x) for x in open('/testbed/documents/nums.txt')))\" > /testbed/answer.txt"
WRONG = "echo 13 > /testbed/answer.txt"


@pytest.mark.parametrize("backend", BACKENDS)
def test_scripted_episode_scores_right_1_and_wrong_0(backend: dict[str, Any]) -> None:
    steps, env = episode(backend, RIGHT)
    no_call, listing, _, submit, (final,) = steps
    assert "No tool call" in no_call[0] and no_call[1:3] == (0.0, False)
    assert {"nums.txt", "notes", "3", "4", "5"} <= set(listing[0].split()), listing[0]
    assert "gone" not in listing[0]  # a None input file is skipped, as upstream
    assert submit[1:3] == (1.0, True) and final == 1.0
    assert env.final_info == {"reward_status": "math", "reward": 1.0, "infra_error": False, "answer_found": True}
    steps, env = episode(backend, WRONG)
    assert steps[3][1:3] == (0.0, True) and env.final_info["reward"] == 0.0


#: A program file the model wrote that names the task's files by their literal absolute paths
#: (issue 28 item 5): only a command string can be rewritten, so ``/testbed`` must be real.
SOLVER = (
    "with open('/testbed/documents/nums.txt') as f:\n"
    "    total = sum(int(x) for x in f)\n"
    "with open('/testbed/answer.txt', 'w') as f:\n"
    "    f.write(str(total))\n"
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_literal_testbed_path_inside_a_program_file_scores_1(backend: dict[str, Any]) -> None:
    env = SandboxEnv.from_dict({**row(), **env_args(backend), "pool_options": POOL})
    try:
        env.reset()
        created = env.step(act("str_replace_editor", command="create", path="/testbed/solve.py", file_text=SOLVER))
        assert "created" in created[0], created
        ran = env.step(act("execute_bash", command="cd /tmp && python3 /testbed/solve.py && pwd"))
        assert "Error" not in ran[0], ran
        assert env.step(act("submit"))[1:3] == (1.0, True)
        assert env.final_info["reward"] == 1.0
    finally:
        env.close()


def test_a_working_dir_that_would_hide_a_host_directory_is_mapped_instead() -> None:
    # /var is the host's inside a plain subprocess sandbox: the env keeps the workspace at /work and
    # maps the row's directory in commands, so the episode still runs and scores (no pool refused).
    task = row(working_dir="/var/task")
    env = SandboxEnv.from_dict({**task, "pool_options": POOL})
    try:
        _, info = env.reset()
        assert not info.get("infra_error"), info
        command = (
            "python3 -c \"print(sum(int(x) for x in open('/var/task/documents/nums.txt')))\" > /var/task/answer.txt"
        )
        env.step(act("execute_bash", command=command))
        assert env.step(act("submit"))[1] == 1.0
    finally:
        env.close()


def test_boxed_answer_written_with_the_editor_and_missing_answer() -> None:
    env = SandboxEnv.from_dict({**row(ground_truth="\\frac{1}{2}"), "pool_options": POOL})
    try:
        env.reset()
        created = env.step(
            act("str_replace_editor", command="create", path="/testbed/answer.txt", file_text="so \\boxed{0.5}")
        )
        assert "created" in created[0]
        assert env.step(act("submit"))[1] == 1.0
        env.reset()  # a fresh sandbox: no answer file is an empty answer, 0.0 as upstream
        assert env.step(act("submit"))[1] == 0.0
        assert env.final_info["reward_status"] == "empty_answer" and env.final_info["answer_found"] is False
    finally:
        env.close()


def test_tools_match_llm_in_sandbox() -> None:
    from llm_in_sandbox.tools import execute_bash_tool, str_replace_editor_tool, submit_tool

    ours = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for tool in (execute_bash_tool, str_replace_editor_tool, submit_tool):
        fn = tool["function"]
        assert set(fn["parameters"]["properties"]) <= set(ours[fn["name"]]["properties"]), fn["name"]
        assert set(fn["parameters"]["required"]) == set(ours[fn["name"]]["required"]), fn["name"]


CASES = [
    ("\\boxed{1/2}", "0.5", "math", None, 1.0),
    ("0.5", "\\frac{1}{2}", "math_mini", None, 1.0),
    ("3", "4", "math", None, 0.0),
    ("so x = 2\\sqrt{2}", "2\\sqrt 2", "physics", None, 1.0),
    ("The answer is C", "C", "chem", None, 1.0),
    ('{"answer": "B"}', "C", "chem", None, 0.0),
    ("b", "B", "biomed", None, 1.0),
    ("I pick \\boxed{D}", "D", "biomed", None, 1.0),
    ("A, C", "A,C", "instruct_pretrain", "Multiple Choice", 1.0),
    ("A", "A,C", "instruct_pretrain", "multiple choice", 2 / 3),
    ("the cat sat on the mat", "a cat sat on a mat", "instruct_pretrain", None, 2 / 3),
    ("42", "42.0", "long_context", "free-form", 1.0),
    ("", "1", "math", None, 0.0),
]


@pytest.mark.parametrize(("answer", "truth", "domain", "qa_type", "expected"), CASES)
def test_reward_rules_match_llm_in_sandbox(answer: str, truth: str, domain: str, qa_type: str | None, expected: float):
    pytest.importorskip("rouge_score", reason="rouge-score is not installed (pip install 'sandboxkit[rllm]')")
    from llm_in_sandbox.benchmark.runner import load_reward_function

    upstream = load_reward_function("instruct_pretrain")(answer, truth, domain=domain, qa_type=qa_type)
    ours = score_answer(answer, truth, domain, qa_type)
    assert ours.reward == pytest.approx(expected) and upstream == pytest.approx(expected)


def test_math_scores_the_same_from_many_threads() -> None:
    # math-verify's signal-based timeout refuses to run outside the main thread (upstream then
    # returns 0.0 for a right answer); rLLM calls environments from a thread pool.
    results: list[float | None] = []
    lock = threading.Lock()

    def score(i: int) -> None:
        value = score_answer(f"\\boxed{{{i}/2}}", str(i / 2), "math").reward
        with lock:
            results.append(value)

    threads = [threading.Thread(target=score, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [1.0] * 16


def test_rows_that_cannot_be_graded_give_no_reward() -> None:
    assert score_answer("x", "{}", "instruct_follow").reward is None
    unknown = score_answer("x", "y", "poetry")
    assert unknown.reward is None and unknown.status == "unknown_domain"
    env = SandboxEnv.from_dict({**row(domain="instruct_follow_ifbench"), "pool_options": POOL})
    try:
        env.reset()
        env.step(act("execute_bash", command="echo hi > /testbed/answer.txt"))
        assert env.step(act("submit"))[1] == 0.0
        assert env.final_info["reward"] is None and env.final_info["reward_status"] == "ungradable"
    finally:
        env.close()


def test_an_explicit_reward_command_beats_the_inferred_rules() -> None:
    # A row with ground_truth, an empty domain and its own reward_command: the command grades it (it was
    # ignored, and the empty domain scored the right answer 0.0 as unknown_domain).
    task = {**row(domain=""), "reward_command": "grep -qx 42 /testbed/answer.txt", "pool_options": POOL}
    env = SandboxEnv.from_dict(task)
    try:
        env.reset()
        env.step(act("execute_bash", command="echo 42 > /testbed/answer.txt"))
        assert env.step(act("submit"))[1] == 1.0, env.final_info
    finally:
        env.close()


@pytest.mark.parametrize("domain", ["", "poetry"])
def test_a_row_with_no_rule_for_its_domain_is_refused_before_the_episode(domain: str) -> None:
    env = SandboxEnv.from_dict({**row(domain=domain), "pool_options": POOL})
    try:
        _, info = env.reset()
        assert "no LLM-in-Sandbox reward rule for domain" in info["error"], info
        assert env.step(act("submit"))[1] == 0.0 and env.final_info.get("reward") is None
    finally:
        env.close()


def test_a_hung_math_worker_is_no_reward_and_replaced() -> None:
    worker = MathWorker(workers=1, wall_s=0.5)
    try:
        assert worker.score("1", "1") == 1.0
        [child] = worker._idle
        os.kill(child.proc.pid, signal.SIGSTOP)  # the worker hangs, using no CPU: not the answer's doing
        with pytest.raises(MathWorkerError, match="no answer within"):
            worker.score("2", "2")
        assert child.proc.poll() is not None  # killed, not left behind
        assert worker.score("2", "3") == 0.0  # a fresh worker answers
    finally:
        worker.close()


#: Answers built to hang math-verify (on main each held the one worker for its 60 s limit, then None).
HOSTILE = {
    "20000-nested-braces": "\\boxed{" + "{" * 20000 + "1" + "}" * 20000 + "}",
    "1MB-of-latex": "\\boxed{" + "\\frac{1}{2}+" * 90000 + "1}",
    "2000-nested-braces": "\\boxed{" + "{" * 2000 + "1" + "}" * 2000 + "}",
    "tower-of-powers": "\\boxed{9^{9^{9^{9}}}}",
}


def test_hostile_math_answers_score_0_and_hold_up_no_one_else() -> None:
    shutdown_math_worker()
    finished: list[str] = []
    scores: dict[str, float | None] = {}
    lock = threading.Lock()

    def score(name: str, answer: str, truth: str) -> None:
        result = score_answer(answer, truth, "math")
        with lock:
            finished.append(name)
            scores[name] = result.reward

    hostile = [threading.Thread(target=score, args=(n, a, "1")) for n, a in HOSTILE.items()]
    fair = [threading.Thread(target=score, args=(f"fair-{i}", f"\\boxed{{{i}/2}}", str(i / 2))) for i in range(8)]
    for t in hostile + fair:
        t.start()
    for t in hostile + fair:
        t.join()
    assert {n: scores[n] for n in HOSTILE} == dict.fromkeys(HOSTILE, 0.0)
    assert [scores[f"fair-{i}"] for i in range(8)] == [1.0] * 8
    # The tower costs math-verify seconds of CPU in one worker; the fair answers were served by others meanwhile.
    assert finished.index("tower-of-powers") > max(finished.index(f"fair-{i}") for i in range(8)), finished


def test_an_answer_past_its_cpu_budget_scores_0_and_its_worker_is_replaced() -> None:
    worker = MathWorker(workers=1, cpu_s=0.5)
    try:
        assert worker.check(HOSTILE["tower-of-powers"], "1") == MathScore(0.0, "cpu_limit")
        assert worker.check("\\boxed{3}", "3") == MathScore(1.0)
    finally:
        worker.close()


@pytest.mark.parametrize(("sig", "blamed_on_the_answer"), [(signal.SIGSEGV, True), (signal.SIGKILL, False)])
def test_a_worker_that_dies_on_an_answer(sig: int, blamed_on_the_answer: bool) -> None:
    # SIGSEGV stands for a parser's recursion overflowing the C stack on the answer; SIGKILL for the
    # OOM killer or an operator, which the answer cannot cause.
    worker = MathWorker(workers=1, cpu_s=60)
    worker.score("1", "1")
    [child] = worker._idle
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(_check_or_error(worker, HOSTILE["tower-of-powers"])))
    try:
        thread.start()
        while _cpu_seconds(child.proc.pid) < 0.5 and thread.is_alive():  # until it is busy on the answer
            thread.join(0.05)
        os.kill(child.proc.pid, sig)
        thread.join()
    finally:
        worker.close()
    if blamed_on_the_answer:
        assert out == [MathScore(0.0, "crashed")]
    else:
        assert isinstance(out[0], MathWorkerError), out


def _check_or_error(worker: MathWorker, answer: str) -> MathScore | MathWorkerError:
    try:
        return worker.check(answer, "1")
    except MathWorkerError as exc:
        return exc


@pytest.mark.parametrize("name", list(HOSTILE), ids=list(HOSTILE))
def test_an_episode_with_a_hostile_math_answer_ends_with_0(name: str) -> None:
    env = SandboxEnv.from_dict({**row(), "pool_options": POOL})
    try:
        env.reset()
        env.step(act("str_replace_editor", command="create", path="/testbed/answer.txt", file_text=HOSTILE[name]))
        reward = env.step(act("submit"))[1]
    finally:
        env.close()
    assert (reward, env.final_info["reward"], env.final_info["infra_error"]) == (0.0, 0.0, False), env.final_info
    assert env.final_info["answer_found"] is True


def test_layout_and_input_files() -> None:
    layout = Layout.from_row({"working_dir": "/work", "output_dir": "/out"})
    assert (layout.input_dir, layout.answer_path) == ("/work/documents", "/out/answer.txt")
    files = input_files({"input_files": {"a.txt": "x", "d/b.csv": "1,2", "skip": None}}, Layout())
    assert files == {"/testbed/documents/a.txt": b"x", "/testbed/documents/d/b.csv": b"1,2"}
    with pytest.raises(ValueError, match="escapes"):
        input_files({"input_files": {"../../etc/passwd": "x"}}, Layout())
    with pytest.raises(ValueError, match="absolute"):
        Layout.from_row({"working_dir": "testbed"})
    bad = SandboxEnv.from_dict({**row(), "input_dir": "documents", "pool_options": POOL})  # built; reset says why
    _, info = bad.reset()
    assert info["infra_error"] is True and "input_dir must be an absolute path" in info["error"]
    bad.close()
    env = SandboxEnv.from_dict({**row(), "step_timeout": 7, "docker_image": "ignored-on-subprocess"})
    assert env.timeout_s == 7 and "step_timeout" not in env.task and "docker_image" not in env.task


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_64_parallel_episodes_leave_nothing_behind(backend: dict[str, Any]) -> None:
    args = env_args(backend)
    before = descendant_processes()
    handle = SandboxEnv.from_dict({**row(), **args, "pool_options": POOL}).handle  # the episodes' shared pool
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as executor:  # as rLLM's engine runs envs
        runs = list(executor.map(lambda i: episode(backend, RIGHT if i % 2 else WRONG), range(64)))
    finals = [steps[-1][0] for steps, _ in runs]
    assert finals == [1.0 if i % 2 else 0.0 for i in range(64)]
    pool = handle.pool.pool
    assert pool.open_sandboxes == pool.metrics()["sandboxes_idle"]  # every episode gave its sandbox back
    handle.close()
    shutdown_math_worker()
    assert pool.open_sandboxes == 0
    assert descendant_processes() <= before
    if "backend_options" in args:
        assert has_overlay_mounts([ROOTFS_ROOT]) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_program_opens_testbed_paths_it_computes(backend: dict[str, Any]) -> None:
    env = SandboxEnv.from_dict({**row(), **env_args(backend), "pool_options": POOL})
    if not env.handle.pool.backend.capabilities.absolute_paths and probe().bwrap is None:
        missing("no bubblewrap to show the workspace at /testbed (the path is mapped instead)")
    try:
        env.reset()
        computed = (
            "python3 -c \"import os; print(open(os.path.join('/test' + 'bed', 'documents', 'nums.txt')).read())\""
        )
        observation, *_ = env.step(act("execute_bash", command=computed + " && pwd"))
        assert observation.split() == ["3", "4", "5", "/testbed"], observation
        if backend.get("rootfs"):  # a private overlay while the episode runs (counted empty afterwards)
            assert len(has_overlay_mounts([ROOTFS_ROOT])) >= 1
        env.step(act("execute_bash", command="echo 12 > answer.txt"))  # relative to the real /testbed
        assert env.step(act("submit"))[1] == 1.0
    finally:
        env.close()


SCENARIOS = [  # (row overrides, the agent's command that writes the answer)
    ({}, RIGHT),
    ({}, WRONG),
    ({"ground_truth": "\\frac{1}{2}"}, "printf '%s' 'so \\boxed{0.5}' > /testbed/answer.txt"),
    ({"domain": "chem", "ground_truth": "C"}, "echo 'The answer is C' > /testbed/answer.txt"),
    ({"domain": "instruct_pretrain", "qa_type": "multiple choice", "ground_truth": "A,C"}, "echo A > answer.txt"),
    ({"domain": "instruct_pretrain", "ground_truth": "a cat sat on a mat"}, "echo the cat sat > answer.txt"),
    ({}, "echo no answer written"),
]


@pytest.mark.docker
@requires(docker_engine_up(), "no Docker engine for llm-in-sandbox's own DockerRuntime")
def test_episodes_score_as_llm_in_sandbox_own_runtime_does() -> None:
    # LLMinSandboxEnv (rllm fork) = llm-in-sandbox's DockerRuntime + Agent._execute_action per step +
    # its instruct_pretrain reward on `cat {output_dir}/answer.txt`. Run exactly that here, on the
    # project's base image, and the same scripted episodes on sandboxkit: the rewards must agree.
    from llm_in_sandbox.agent import Agent
    from llm_in_sandbox.benchmark.runner import load_reward_function

    upstream_reward = load_reward_function("instruct_pretrain")
    executor = Agent.__new__(Agent)  # as LLMinSandboxEnv borrows it, for _execute_action only
    runtime = lis.DockerRuntime(docker_image="sandboxkit-base:latest", repo_path="/testbed", logger=False)
    theirs, ours = [], []
    try:
        with tempfile.TemporaryDirectory() as documents:
            Path(documents, "nums.txt").write_text("3\n4\n5\n")
            runtime.copy_dir_to_container(documents, "/testbed/documents")
        for overrides, command in SCENARIOS:
            task = {**row(), **overrides}
            runtime.run("rm -f /testbed/answer.txt")
            for action in (lis.Action("execute_bash", {"command": command}), lis.Action("submit", {})):
                executor._execute_action(action, runtime)
            answer, _ = runtime.run("cat /testbed//answer.txt 2>/dev/null || echo ''")
            extra = {k: v for k, v in task.items() if k != "ground_truth"}
            theirs.append(upstream_reward(answer.strip(), task["ground_truth"], **extra))
            steps, _ = episode({"backend": "subprocess"}, command, task)
            ours.append(steps[-1][0])
    finally:
        runtime.close()
    assert ours == pytest.approx(theirs)
    assert theirs == pytest.approx([1.0, 0.0, 1.0, 1.0, 2 / 3, theirs[5], 0.0]) and 0 < theirs[5] < 1
