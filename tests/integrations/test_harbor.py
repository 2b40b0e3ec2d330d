"""Harbor tasks: task directories loaded, verified as Harbor's verifier does, and run as rLLM environments.

Task directories are written here in Harbor's layout (instruction.md, task.toml,
environment/Dockerfile or [environment] docker_image, tests/test.sh writing
/logs/verifier/reward.txt or reward.json) and run on real Docker containers.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.backends.subprocess._rootfs import has_overlay_mounts
from sandboxkit.errors import InvalidRequest
from sandboxkit.integrations._harbor_workspace import WorkspaceUnreadable, parse_archive
from sandboxkit.integrations.harbor import (
    HarborEnv,
    HarborTask,
    HarborTaskError,
    HarborToolEnv,
    HarborVerdict,
    parse_reward_files,
    verify_session,
)
from sandboxkit.integrations.rllm import RLLMSandbox
from sandboxkit.pool import SandboxPool
from sandboxkit.sync import SyncSandboxPool
from support.integrations import docker_backend_present, docker_engine_up
from support.marks import missing, requires
from support.rootfs import CACHE, base_image_tarball
from support.rootfs import busybox as support_busybox

POOL = {"max_concurrency": 16, "max_sandboxes": 32}
BASE_IMAGE = "sandboxkit-base:latest"

docker_only = [
    pytest.mark.docker,
    requires(docker_backend_present(), "the docker backend module is not in this checkout"),
    requires(docker_engine_up(), "no Docker engine"),
]

CHECK_ANSWER = """\
#!/bin/sh
# Harbor's contract: the verdict is the number written to /logs/verifier/reward.txt.
if [ "$(cat /testbed/answer.txt 2>/dev/null)" = "42" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def make_task(
    root: Path,
    test_sh: str = CHECK_ANSWER,
    *,
    toml: str | None = None,
    dockerfile: str | None = None,
    extra_tests: dict[str, str] | None = None,
) -> Path:
    """A Harbor task directory."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "instruction.md").write_text(
        "Write the answer to life, the universe and everything to /testbed/answer.txt.\n"
    )
    if toml is None:
        toml = f'[task]\nname = "answer"\n[environment]\ndocker_image = "{BASE_IMAGE}"\nworkdir = "/testbed"\n'
        toml += "memory = '1G'\ncpus = 1\n[verifier]\ntimeout_sec = 60\n"
    (root / "task.toml").write_text(toml)
    if dockerfile is not None:
        (root / "environment").mkdir(exist_ok=True)
        (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test.sh").write_text(test_sh)
    for name, text in (extra_tests or {}).items():
        (root / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "tests" / name).write_text(text)
    return root


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def run_episode(
    task: Path | HarborTask, commands: list[str], backend: dict[str, Any] | None = None
) -> tuple[float, HarborEnv]:
    """One episode as rLLM's engine runs it: reset, tool calls, submit (the verifier's reward), close."""
    args = {"pool_options": POOL, **(backend or {})}
    env = HarborEnv.from_dict({"task_dir": str(task), **args}) if isinstance(task, Path) else HarborEnv(task, **args)
    try:
        observation, info = env.reset()
        assert "answer to life" in observation and not info.get("infra_error"), info
        for command in commands:
            env.step(call("execute_bash", command=command))
        _, reward, done, _ = env.step(call("submit"))
        assert done is True
    finally:
        env.close()
    return reward, env


#: A workspace root of this module's own, so overlay mounts counted there are this module's.
ROOTFS_ROOT = os.path.join(tempfile.gettempdir(), f"sandboxkit-test-harbor-p{os.getpid()}")


@pytest.fixture(scope="module", autouse=True)
def _remove_rootfs_root() -> Iterator[None]:
    yield
    assert has_overlay_mounts([ROOTFS_ROOT]) == []
    shutil.rmtree(ROOTFS_ROOT, ignore_errors=True)


def rootfs_backend() -> dict[str, Any]:
    """HarborEnv arguments: subprocess sandboxes on the base image (exported once per machine) as root filesystem."""
    tarball = base_image_tarball()
    if tarball is None:
        missing("the base image could not be exported here")
    return {"backend": "subprocess", "backend_options": {"rootfs": tarball, "rootfs_cache": CACHE, "root": ROOTFS_ROOT}}


rootfs_only = [
    pytest.mark.docker,  # the image is exported from Docker
    requires(os.geteuid() == 0, "rootfs sandboxes mount an overlay per sandbox: root only"),
    requires(docker_engine_up(), "no Docker engine to export the image from"),
]
BACKENDS = [
    pytest.param("docker", id="docker", marks=docker_only),
    pytest.param("subprocess-rootfs", id="subprocess-rootfs", marks=rootfs_only),
]


def backend_args(name: str) -> dict[str, Any]:
    return {"backend": "docker"} if name == "docker" else rootfs_backend()


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (["echo 42 > answer.txt"], 1.0),
        (["echo 41 > /testbed/answer.txt"], 0.0),
        ([], 0.0),
    ],
    ids=["right", "wrong", "nothing"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_test_sh_writes_reward_txt_and_the_episode_gets_it(
    tmp_path: Path, commands: list[str], expected: float, backend
):
    reward, env = run_episode(make_task(tmp_path / "t"), commands, backend_args(backend))
    assert reward == expected
    assert env.final_info["reward"] == expected and env.final_info["reward_status"] == "ok"
    assert env.verdict is not None and env.verdict.exit_code == 0


VERDICTS = [
    ('echo \'{"reward": 0.5, "accuracy": 1}\' > /logs/verifier/reward.json', 0.5, "ok"),
    ("echo '{\"tests\": 1}' > /logs/verifier/reward.json; echo 0 > /logs/verifier/reward.txt", 1.0, "ok"),
    # test.sh ran on what the agent left and gave no number: the agent's outcome, 0.0 (the status says why).
    ('echo \'{"a": 1, "b": 0}\' > /logs/verifier/reward.json', 0.0, "bad_reward_file"),
    (": > /logs/verifier/reward.txt", 0.0, "empty_reward_file"),
    ("echo passed > /logs/verifier/reward.txt", 0.0, "bad_reward_file"),
    ("echo nan > /logs/verifier/reward.txt", 0.0, "bad_reward_file"),
    ("echo 'all tests passed'; exit 1", 0.0, "no_reward_file"),
    ("sleep 30; echo 1 > /logs/verifier/reward.txt", 0.0, "verifier_timeout"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reward_is_only_what_test_sh_wrote(tmp_path: Path, backend: str) -> None:
    toml = f'[environment]\ndocker_image = "{BASE_IMAGE}"\nworkdir = "/testbed"\n[verifier]\ntimeout_sec = 2\n'
    tasks = [
        HarborTask.load(make_task(tmp_path / str(i), f"#!/bin/sh\n{v[0]}\n", toml=toml)) for i, v in enumerate(VERDICTS)
    ]
    args = backend_args(backend)
    if backend == "docker":
        options = tasks[0].docker_options()
    else:
        options = {**args["backend_options"], "workdir": tasks[0].workdir}
    pool = SyncSandboxPool(args["backend"], backend_options=options, max_concurrency=2)

    async def verify_each(p: SandboxPool) -> list[HarborVerdict]:
        verdicts = []
        async with p.session() as session:  # one container, verified once per task
            for task in tasks:
                # The agent plants a perfect score where the verifier writes: it must not count.
                planted = await session.exec(
                    "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; echo 1 > /logs/verifier/reward.json"
                )
                assert planted.ok, planted
                verdicts.append(await verify_session(task, session, p))
        return verdicts

    try:
        verdicts = pool.submit(verify_each).result(timeout=300)
    finally:
        pool.close()
    got = [(v.reward, v.status) for v in verdicts]
    assert got == [(reward, status) for _, reward, status in VERDICTS]
    assert "all tests passed" in verdicts[6].output and verdicts[6].exit_code == 1
    assert verdicts[0].rewards == {"reward": 0.5, "accuracy": 1.0}


@pytest.mark.parametrize("_", [pytest.param(None, id="docker", marks=docker_only)])
def test_a_task_with_its_own_dockerfile_and_test_files(tmp_path: Path, _) -> None:
    dockerfile = f"FROM {BASE_IMAGE}\nUSER root\nRUN mkdir -p /srv/app && echo 6 > /srv/app/x.txt\nWORKDIR /srv/app\n"
    test_sh = textwrap.dedent(
        """\
        #!/bin/bash
        # runs in the task's WORKDIR, with the verifier's env and a helper uploaded with it
        [ "$PWD" = /srv/app ] && [ "$EXPECTED" = 42 ] || { echo "bad env: $PWD $EXPECTED"; exit 1; }
        python3 /tests/lib/check.py > /logs/verifier/reward.txt
        """
    )
    check = "print(1.0 if open('/srv/app/answer.txt').read().strip() == '42' else 0.0)\n"
    toml = '[task]\nname = "Own Image"\n[verifier]\ntimeout_sec = 60\nenv = { EXPECTED = "42" }\n'
    task = HarborTask.load(
        make_task(tmp_path / "t", test_sh, toml=toml, dockerfile=dockerfile, extra_tests={"lib/check.py": check})
    )
    assert task.image is None and task.workdir == "/srv/app" and set(task.tests) == {"test.sh", "lib/check.py"}
    tag = task.image_tag()
    try:
        assert task.build_image() == tag == task.build_image()  # built once, then found by content
        reward, env = run_episode(task, ["test -f x.txt && echo $(( $(cat x.txt) * 7 )) > answer.txt"])
        assert reward == 1.0, env.final_info
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)


def test_parse_reward_files() -> None:
    assert parse_reward_files(None, b"0.25\n")[:3] == (0.25, {"reward": 0.25}, "ok")
    assert parse_reward_files(b'{"score": 2}', None)[:3] == (2.0, {"score": 2.0}, "ok")
    assert parse_reward_files(b'{"reward": true}', None)[2] == "bad_reward_file"
    assert parse_reward_files(b"[1]", None)[2] == "bad_reward_file"
    assert parse_reward_files(b"inf", None)[2] == "bad_reward_file"
    assert parse_reward_files(None, b"inf")[2] == "bad_reward_file"
    assert parse_reward_files(None, None)[:3] == (None, {}, "no_reward_file")


def test_load_checks_the_task_directory(tmp_path: Path) -> None:
    task = HarborTask.load(make_task(tmp_path / "ok"))
    assert task.name == "answer" and task.workdir == "/testbed" and task.image == BASE_IMAGE
    assert task.limits.memory_mb == 1024 and task.limits.cpus == 1.0 and task.verifier_timeout_s == 60.0
    assert task.docker_options()["writable_dirs"][0] == "/testbed"
    assert json.loads(json.dumps(task.config))["environment"]["memory"] == "1G"
    broken = make_task(tmp_path / "broken")
    (broken / "tests" / "test.sh").unlink()
    with pytest.raises(HarborTaskError, match=r"test\.sh is missing"):
        HarborTask.load(broken)
    (broken / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (broken / "task.toml").write_text("[environment\n")
    with pytest.raises(HarborTaskError, match="not valid TOML"):
        HarborTask.load(broken)
    (broken / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n")
    with pytest.raises(HarborTaskError, match="neither"):
        HarborTask.load(broken)
    (broken / "task.toml").write_text(f'[environment]\ndocker_image = "{BASE_IMAGE}"\n[verifier]\ntimeout_sec = -1\n')
    with pytest.raises(HarborTaskError, match="positive"):
        HarborTask.load(broken)
    for workdir in ("/", "/tests", "/logs/agent"):
        (broken / "task.toml").write_text(f'[environment]\ndocker_image = "{BASE_IMAGE}"\nworkdir = "{workdir}"\n')
        with pytest.raises(HarborTaskError, match="which the verifier owns"):
            HarborTask.load(broken)
    (broken / "instruction.md").unlink()
    with pytest.raises(HarborTaskError, match=r"instruction\.md is missing"):
        HarborTask.load(broken)
    with pytest.raises(HarborTaskError, match="names no Harbor task"):
        HarborEnv.from_dict({"backend": "docker"})


def test_a_backend_without_its_own_root_is_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="no root filesystem of their own"):
        HarborEnv(make_task(tmp_path / "t"), backend=SubprocessBackend(), pool_options=POOL)


@pytest.mark.parametrize("_", [pytest.param(None, id="subprocess-rootfs", marks=rootfs_only)])
def test_a_busybox_only_image_built_exported_and_run_without_docker(tmp_path: Path, _) -> None:
    # A task whose image has no Python and no bash: built by Docker once, exported, then run by the
    # subprocess backend on its own root filesystem (Docker is not involved after the export).
    busybox = support_busybox()
    if busybox is None:
        missing("no static busybox here: apt-get install busybox-static")
    env_dir = tmp_path / "t" / "environment"
    env_dir.mkdir(parents=True)
    shutil.copy(busybox, env_dir / "busybox")
    applets = ["sh", "cat", "chmod", "find", "mkdir", "echo", "test", "rm", "ls"]
    copies = "".join(f"COPY busybox /bin/{name}\n" for name in applets)
    dockerfile = f"FROM scratch\n{copies}COPY busybox /bin/busybox\nWORKDIR /testbed\n"
    toml = '[task]\nname = "busybox only"\n[verifier]\ntimeout_sec = 30\n'
    task = HarborTask.load(make_task(tmp_path / "t", CHECK_ANSWER, toml=toml, dockerfile=dockerfile))
    cache = tmp_path / "export"
    try:
        tarball = task.rootfs_tarball(cache)
        assert tarball == task.rootfs_tarball(cache)  # exported once per image
        backend = {
            "backend": "subprocess",
            "backend_options": {"rootfs_cache": str(cache / "unpacked"), "root": ROOTFS_ROOT},
        }
        right, env = run_episode(task, ["echo 42 > answer.txt; ls /usr/bin/python3 || echo no python"], backend)
        assert right == 1.0, (env.final_info, env.verdict)
        wrong, _ = run_episode(task, ["echo 7 > /testbed/answer.txt"], backend)
        assert wrong == 0.0
    finally:
        subprocess.run(["docker", "rmi", "-f", task.image_tag()], capture_output=True, timeout=120)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rllm_shell_script_evaluator_calls_on_rllm_sandbox(tmp_path: Path, backend: str) -> None:
    # The calls rLLM's Harbor-style ShellScriptEvaluator (rllm/eval/shell_script_evaluator.py) makes
    # on an rllm.sandbox.protocol.Sandbox; rLLM is installed from git only, so they are replayed here.
    task = make_task(tmp_path / "t", extra_tests={"a.txt": "from the tests dir\n"})
    args = backend_args(backend)
    sandbox = RLLMSandbox(
        "harbor", args["backend"], workdir="/testbed", pool_options=POOL, backend_options=args.get("backend_options")
    )
    try:
        sandbox.exec("echo 42 > /testbed/answer.txt")  # the agent's work
        sandbox.exec("mkdir -p /tmp/rllm /logs/verifier", timeout=10)
        sandbox.upload_dir(str(task / "tests"), "/tests")
        assert sandbox.exec("cat /tests/a.txt") == "from the tests dir\n"
        sandbox.exec("chmod +x /tests/test.sh && cd /testbed && /tests/test.sh", timeout=600)
        assert sandbox.exec("test -f /logs/verifier/reward.txt && echo yes || echo no").strip() == "yes"
        assert float(sandbox.exec("cat /logs/verifier/reward.txt").strip()) == 1.0
        assert sandbox.download_file("/logs/verifier/reward.txt") == b"1\n"
    finally:
        sandbox.close()


@pytest.mark.parametrize("_", [pytest.param(None, id="docker", marks=docker_only)])
def test_trl_environment_factory_contract(tmp_path: Path, _) -> None:
    import inspect

    from transformers.utils import get_json_schema

    task = make_task(tmp_path / "t")
    env = HarborToolEnv(pool_options=POOL)  # what GRPOTrainer(environment_factory=HarborToolEnv) builds
    # TRL exposes every public function of the class but reset/get_reward as a tool, with this schema.
    tools = [n for n, _ in inspect.getmembers(HarborToolEnv, inspect.isfunction) if not n.startswith("_")]
    assert sorted(tools) == ["bash", "get_reward", "reset"]
    assert get_json_schema(env.bash)["function"]["parameters"]["required"] == ["command"]
    row = {"prompt": [{"role": "user", "content": "solve it"}], "task_dir": str(task)}
    assert "answer to life" in env.reset(**row)
    assert "42" in env.bash("echo 42 > answer.txt && cat /testbed/answer.txt")
    assert env.get_reward() == 1.0
    env.reset(**row)  # the instance is reused for the next rollout: a fresh sandbox
    assert "No such file" in env.bash("cat answer.txt")
    assert env.get_reward() == 0.0
    broken = make_task(tmp_path / "broken", "#!/bin/sh\nexit 0\n")
    env.reset(task_dir=str(broken))
    assert env.get_reward() == 0.0  # test.sh ran on the agent's workspace and wrote no reward: its outcome


@pytest.mark.parametrize("backend", BACKENDS)
def test_parallel_episodes_leave_nothing_behind(tmp_path: Path, backend: str) -> None:
    import concurrent.futures

    task = HarborTask.load(make_task(tmp_path / "t"))
    args = backend_args(backend)
    n = 8 if backend == "docker" else 16  # containers start slower than overlays; both cross the thread pool
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as executor:  # as rLLM's engine runs envs
        runs = list(executor.map(lambda i: run_episode(task, [f"echo {41 + i % 2} > answer.txt"], args), range(n)))
    assert [reward for reward, _ in runs] == [float(i % 2) for i in range(n)]
    pool = runs[0][1].handle.pool.pool
    assert pool.open_sandboxes == pool.metrics()["sandboxes_idle"]
    runs[0][1].handle.close()
    assert pool.open_sandboxes == 0
    if backend == "docker":
        ps = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=sandboxkit.host_pid={os.getpid()}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert ps.returncode == 0 and ps.stdout.strip() == ""
    else:
        assert has_overlay_mounts([ROOTFS_ROOT]) == []


@pytest.mark.parametrize("_", [pytest.param(None, id="subprocess-rootfs", marks=rootfs_only)])
def test_trl_grpo_trainer_runs_harbor_tasks(tmp_path: Path, monkeypatch, _) -> None:
    # A real GRPOTrainer step with environment_factory=HarborToolEnv: TRL resets one environment per
    # rollout from the row's task_dir and logs get_reward() as the "HarborToolEnv" reward. The tiny
    # random model makes no tool calls, so each task's own verifier decides: one always passes, one never.
    pytest.importorskip("trl")
    import functools

    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    words = ["<pad>", "<eos>", "<unk>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "user", "hello"]
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )
    tokenizer.chat_template = qwen3_chat_template  # a template TRL can parse tool calls from
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    passes = make_task(tmp_path / "passes", "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    fails = make_task(tmp_path / "fails", "#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n")
    prompt = [{"role": "user", "content": "hello"}]
    dataset = Dataset.from_list(
        [{"prompt": prompt, "task_dir": str(passes)}, {"prompt": prompt, "task_dir": str(fails)}]
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        shuffle_dataset=False,
    )
    trainer = GRPOTrainer(
        model=Qwen2ForCausalLM(config),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=functools.partial(HarborToolEnv, **rootfs_backend(), pool_options=POOL),
    )
    assert trainer.reward_func_names == ["HarborToolEnv"]
    trainer.train()
    logged = [e for e in trainer.state.log_history if "rewards/HarborToolEnv/mean" in e]
    assert len(logged) == 1 and logged[0]["rewards/HarborToolEnv/mean"] == pytest.approx(0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_oracle_solution_scores_1(tmp_path: Path, backend: str) -> None:
    root = make_task(tmp_path / "t")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text('#!/bin/sh\necho "$ANSWER" > answer.txt\n')
    with open(root / "task.toml", "a") as f:
        f.write('[solution]\nenv = { ANSWER = "42" }\n')
    task = HarborTask.load(root)
    assert set(task.solution) == {"solve.sh"} and task.solution_env == {"ANSWER": "42"}
    env = HarborEnv(task, pool_options=POOL, **backend_args(backend))
    try:
        env.reset()
        env.solve()
        assert env.step(call("submit"))[1] == 1.0
        env.reset()
        assert env.step(call("submit"))[1] == 0.0  # a fresh sandbox: the oracle's answer is gone
    finally:
        env.close()
    unsolved = HarborEnv(make_task(tmp_path / "unsolved"), pool_options=POOL, **backend_args(backend))
    try:
        unsolved.reset()
        with pytest.raises(HarborTaskError, match=r"no solution/solve\.sh"):
            unsolved.solve()
    finally:
        unsolved.close()


# ---------------------------------------------------------------- attacks on the verifier (issue 27, items 6, 7, 11)

#: A checker in the task's own tests/ that imports json from /tests (its own directory) and runs on python3.
CHECK_WITH_PYTHON = """\
#!/bin/sh
python3 /tests/check.py > /logs/verifier/reward.txt
"""
CHECK_PY = "import json\nprint(json.dumps(1 if open('/testbed/answer.txt').read().strip() == '42' else 0))\n"
FORGE = "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\nexit 0\n"
#: What the agent runs to plant a forged verdict where the verifier looks (root in its image on rootfs).
PLANT = [
    # A json module in /tests, imported by the checker before the standard library's.
    "mkdir -p /tests && printf 'import os\\nos.system(\"echo 1 > /logs/verifier/reward.txt\")\\nos._exit(0)\\n'"
    " > /tests/json.py || true",
    # A python3 ahead of the image's on PATH.
    f"mkdir -p /usr/local/bin && printf '{FORGE}' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3 || true",
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_planted_checker_module_or_interpreter_does_not_score(tmp_path: Path, backend: str) -> None:
    task = make_task(tmp_path / "t", CHECK_WITH_PYTHON, extra_tests={"check.py": CHECK_PY})
    reward, env = run_episode(task, [*PLANT, "echo 41 > answer.txt"], backend_args(backend))
    assert (reward, env.final_info["reward_status"]) == (0.0, "ok"), env.final_info
    solved, env = run_episode(task, [*PLANT, "echo 42 > answer.txt"], backend_args(backend))
    assert (solved, env.final_info["reward_status"]) == (1.0, "ok"), env.final_info


#: A cell that starts a thread in the agent's kernel: it waits for the verifier's test.sh, then keeps
#: replacing reward.json (which the verdict prefers over reward.txt) with a perfect score.
KERNEL_FORGER = """\
import os, threading, time
def forge():
    while not os.path.exists('/tests/test.sh'):
        time.sleep(0.01)
    while True:
        try:
            os.makedirs('/logs/verifier', exist_ok=True)
            with open('/logs/verifier/reward.json', 'w') as f:
                f.write('{"reward": 1.0}')
        except OSError:
            pass
        time.sleep(0.001)
threading.Thread(target=forge, daemon=True).start()
'started'
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_thread_left_running_cannot_replace_the_verdict(tmp_path: Path, backend: str) -> None:
    task = make_task(tmp_path / "t")
    env = HarborEnv(task, pool_options=POOL, stateful_python=True, **backend_args(backend))
    try:
        env.reset()
        observation, *_ = env.step(call("code_interpreter", code=KERNEL_FORGER))
        assert "started" in observation, observation
        env.step(call("execute_bash", command="echo 41 > answer.txt"))
        _, reward, done, info = env.step(call("submit"))
    finally:
        env.close()
    assert done and (reward, info["reward_status"]) == (0.0, "ok"), info


#: Each breaks what the verifier used to share with the agent; the episode still ends with a number.
SABOTAGE = {
    "tests-symlink": "rm -rf /tests 2>/dev/null; ln -s /tmp /tests 2>/dev/null; true",
    "verifier-dir-a-file": "rm -rf /logs/verifier 2>/dev/null; echo x > /logs/verifier 2>/dev/null; true",
    "verifier-dir-150k-files": (
        "mkdir -p /logs/verifier && cd /logs/verifier && seq -f 'a-forged-verdict-%06g' 150000 | xargs touch; true"
    ),
    "verifier-dir-unwritable": "mkdir -p /logs/verifier; chmod 0 /logs/verifier 2>/dev/null; true",
}


@pytest.mark.parametrize("attack", list(SABOTAGE), ids=list(SABOTAGE))
@pytest.mark.parametrize("backend", BACKENDS)
def test_sabotaging_the_verifier_directories_leaves_a_normal_verdict(tmp_path: Path, backend: str, attack: str) -> None:
    reward, env = run_episode(
        make_task(tmp_path / "t"), ["echo 42 > answer.txt", SABOTAGE[attack]], backend_args(backend)
    )
    assert (reward, env.final_info["reward_status"], env.final_info["infra_error"]) == (1.0, "ok", False), (
        env.final_info
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_solution_that_hangs_the_verifier_scores_0_not_none(tmp_path: Path, backend: str) -> None:
    test_sh = "#!/bin/sh\nsh /testbed/solve.sh && echo 1 > /logs/verifier/reward.txt\n"
    toml = f'[environment]\ndocker_image = "{BASE_IMAGE}"\nworkdir = "/testbed"\n[verifier]\ntimeout_sec = 3\n'
    task = make_task(tmp_path / "t", test_sh, toml=toml)
    reward, env = run_episode(task, ["echo 'while :; do :; done' > solve.sh"], backend_args(backend))
    assert (reward, env.final_info["reward"], env.final_info["reward_status"]) == (0.0, 0.0, "verifier_timeout")
    assert env.final_info["infra_error"] is False


COMPARE_WITH_EXPECTED = """\
#!/bin/sh
# The expected answer ships with the tests; the agent never sees /tests.
if cmp -s /testbed/answer.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_link_to_the_expected_answer_is_not_carried_to_the_verifier(tmp_path: Path, backend: str) -> None:
    task = make_task(tmp_path / "t", COMPARE_WITH_EXPECTED, extra_tests={"expected.txt": "42\n"})
    for link in ("ln -s /tests/expected.txt answer.txt", "ln -s / root && ln -s root/tests/expected.txt answer.txt"):
        reward, env = run_episode(task, [link], backend_args(backend))
        assert (reward, env.final_info["reward_status"]) == (0.0, "ok"), (link, env.final_info)
        assert env.verdict is not None and "answer.txt" in env.verdict.detail


CHECK_WORKSPACE = """\
#!/bin/sh
cd /testbed || exit 1
ok=1
[ -d empty ] || { echo no empty dir; ok=0; }
[ -x run.sh ] && [ "$(./run.sh)" = 42 ] || { echo run.sh lost its mode; ok=0; }
[ "$(cat sub/.hidden)" = x ] && [ "$(cat link)" = x ] && [ -L link ] || { echo no hidden file or link; ok=0; }
[ ! -e seed.txt ] || { echo a deleted file came back; ok=0; }
[ "$(stat -c %a private)" = 700 ] || { echo private lost its mode; ok=0; }
echo $ok > /logs/verifier/reward.txt
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_verifier_sees_the_workspace_as_the_agent_left_it(tmp_path: Path, backend: str) -> None:
    task = make_task(tmp_path / "t", CHECK_WORKSPACE)
    commands = [
        "echo seed > seed.txt",
        "mkdir -p empty sub private && echo x > sub/.hidden && ln -s sub/.hidden link && chmod 700 private",
        "printf '#!/bin/sh\\necho 42\\n' > run.sh && chmod +x run.sh && rm seed.txt",
    ]
    reward, env = run_episode(task, commands, backend_args(backend))
    assert reward == 1.0, (env.final_info, env.verdict)


def _tar(*entries: tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info, body = entry if isinstance(entry, tuple) else (entry, b"")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if body else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def test_an_untrusted_workspace_archive_keeps_only_what_stays_inside() -> None:
    data = _tar(
        _member("./", tarfile.DIRTYPE, mode=0o755),
        (_member("./ok.txt", mode=0o4755), b"fine"),
        (_member("../escape.txt"), b"x"),
        (_member("/etc/passwd"), b"x"),
        _member("./bin", tarfile.SYMTYPE, "/usr/local/bin"),  # then a file through the link
        (_member("./bin/python3"), b"#!/bin/sh\n"),
        _member("./up", tarfile.SYMTYPE, ".."),
        _member("./tests", tarfile.SYMTYPE, "up/../../tests/expected.txt"),
        _member("./a", tarfile.SYMTYPE, "b"),
        _member("./b", tarfile.SYMTYPE, "a"),
        _member("./proc", tarfile.SYMTYPE, "/proc/self/root/tests"),
        _member("./hard", tarfile.LNKTYPE, "ok.txt"),
        _member("./fifo", tarfile.FIFOTYPE),
        _member("./lib", tarfile.SYMTYPE, "sub/../ok.txt"),
        (_member("./" + "n" * 256), b"no file system names a file so"),
    )
    copy = parse_archive(data, "/testbed")
    assert copy.files == {"/testbed/ok.txt": b"fine", "/testbed/hard": b"fine"}
    assert copy.modes == {"/testbed/ok.txt": 0o755, "/testbed/hard": 0o755}  # setuid dropped
    assert copy.links == {"/testbed/bin": "/usr/local/bin", "/testbed/up": "..", "/testbed/lib": "sub/../ok.txt"}
    dropped = " ".join(copy.dropped)
    for name in ("escape.txt", "/etc/passwd", "bin/python3", "'tests'", "'a'", "'b'", "'proc'", "'fifo'", "n" * 256):
        assert name in dropped, (name, dropped)
    with pytest.raises(WorkspaceUnreadable):
        parse_archive(b"not a tar archive" * 100, "/testbed")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workspace_larger_than_the_file_size_limit_is_carried_whole(tmp_path: Path, backend: str) -> None:
    # Each file is under the sandbox's file size limit (64 MiB by default); the workspace is not.
    test_sh = "#!/bin/sh\n[ $(cat /testbed/big.* | wc -c) -eq 94371840 ] && echo 1 > /logs/verifier/reward.txt\n"
    task = make_task(tmp_path / "t", test_sh)
    write = "for i in 1 2 3; do head -c 31457280 /dev/urandom > big.$i; done"
    reward, env = run_episode(task, [write], backend_args(backend))
    assert (reward, env.final_info["reward_status"]) == (1.0, "ok"), (env.final_info, env.verdict)


#: The agent (root in its image) replaces dd, which cuts its workspace archive: the first part becomes a
#: link to /tmp, a mount the host cannot reach. Its archive is unreadable: its outcome, not "no reward".
FAKE_DD = (
    "mkdir -p /usr/local/bin && printf '%s\\n' '#!/bin/sh' 'echo hi > /tmp/x' "
    '\'for a; do case "$a" in of=*.0) ln -sf /tmp/x "${a#of=}";; of=*) : > "${a#of=}";; esac; done\' '
    "'cat >/dev/null' > /usr/local/bin/dd && chmod +x /usr/local/bin/dd; true"
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sabotaged_workspace_archive_scores_0_not_none(tmp_path: Path, backend: str) -> None:
    reward, env = run_episode(make_task(tmp_path / "t"), ["echo 42 > answer.txt", FAKE_DD], backend_args(backend))
    assert env.final_info["infra_error"] is False, env.final_info
    if backend == "subprocess-rootfs":  # on Docker the agent is not root: dd stays the image's
        assert (reward, env.final_info["reward"], env.final_info["reward_status"]) == (0.0, 0.0, "workspace_unreadable")
    else:
        assert reward == 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workspace_of_2000_directories_is_carried(tmp_path: Path, backend: str) -> None:
    # A file API call per directory took the Docker engine minutes for this; one unpacked archive does not.
    test_sh = "#!/bin/sh\n[ $(cat /testbed/d*/f | wc -l) -eq 2000 ] && echo 1 > /logs/verifier/reward.txt\n"
    make = "for i in $(seq 2000); do mkdir d$i && echo $i > d$i/f; done"
    reward, env = run_episode(make_task(tmp_path / "t", test_sh), [make], backend_args(backend))
    assert (reward, env.final_info["reward_status"]) == (1.0, "ok"), (env.final_info, env.verdict)


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_the_verifier_runs_that_links_the_reward_file_away_scores_0(tmp_path: Path, backend: str) -> None:
    # test.sh runs the agent's code (as Harbor's do); that code turns reward.txt into a link to /tmp,
    # a mount the host cannot read. What the agent's code does is its outcome: 0.0, not "no reward".
    test_sh = "#!/bin/sh\nsh /testbed/solve.sh\necho 0 > /logs/verifier/reward.txt\n"
    reward, env = run_episode(
        make_task(tmp_path / "t", test_sh),
        ["echo 'ln -sf /tmp/x /logs/verifier/reward.txt' > solve.sh"],
        backend_args(backend),
    )
    assert (reward, env.final_info["reward"], env.final_info["infra_error"]) == (0.0, 0.0, False), env.final_info
