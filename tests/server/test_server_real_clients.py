"""The real clients, unchanged, against ``sandboxkit serve --backend subprocess`` on loopback.

* the ``sandbox-fusion`` PyPI client: ``run_code`` (sync, ``requests``) and ``run_code_async``
  (``aiohttp``), endpoint from ``set_endpoint`` and from ``$SANDBOX_FUSION_ENDPOINT``;
* verl 0.9.1's ``verl.utils.reward_score.sandbox_fusion.compute_score`` (stdio and fn_name modes)
  and ``default_compute_score`` (the ``reward.sandbox_fusion.url`` path), correct and wrong code.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import sandbox_fusion
from sandbox_fusion import RunCodeRequest, RunStatus, SummaryMapping, summary_run_code_result

from support.marks import verl_reward_score
from support.serve import ServeProcess


@pytest.fixture
def endpoint(sk_serve: ServeProcess) -> Iterator[str]:
    """Point the sandbox-fusion client at the server with its own ``set_endpoint``, then restore."""
    from sandbox_fusion import config

    saved = (config.SANDBOX_ENDPOINT, config.DATASET_ENDPOINT)
    sandbox_fusion.set_endpoint(sk_serve.url)
    yield sk_serve.url
    config.SANDBOX_ENDPOINT, config.DATASET_ENDPOINT = saved


# ---------------------------------------------------------------------------- sandbox-fusion client


def test_sandbox_fusion_client_sync(endpoint: str) -> None:
    ok = sandbox_fusion.run_code(RunCodeRequest(code="print(input() * 2)", stdin="ab", language="python"))
    assert ok.status == RunStatus.Success
    assert ok.run_result is not None and ok.run_result.stdout == "abab\n"
    assert ok.compile_result is None

    failed = sandbox_fusion.run_code(RunCodeRequest(code="raise SystemExit(2)", language="python"))
    assert failed.status == RunStatus.Failed and failed.run_result is not None
    assert failed.run_result.return_code == 2

    mapping = SummaryMapping(CompileFailed="CE", RunTimeout="TLE", RunFailed="RE")
    compile_error = sandbox_fusion.run_code(RunCodeRequest(code="int main( {", language="cpp"))
    assert summary_run_code_result(compile_error, mapping) == "CE"
    timeout = sandbox_fusion.run_code(RunCodeRequest(code="while True: pass", language="python", run_timeout=0.5))
    assert summary_run_code_result(timeout, mapping) == "TLE"
    assert summary_run_code_result(failed, mapping) == "RE"


def test_sandbox_fusion_client_files_round_trip(endpoint: str) -> None:
    import base64

    req = RunCodeRequest(
        code="open('out.txt','w').write(open('in.txt').read()[::-1])",
        language="python",
        files={"in.txt": base64.b64encode(b"stressed").decode()},
        fetch_files=["out.txt"],
    )
    resp = sandbox_fusion.run_code(req)
    assert base64.b64decode(resp.files["out.txt"]) == b"desserts"


def test_sandbox_fusion_client_async_concurrent(endpoint: str) -> None:
    async def main() -> list[sandbox_fusion.RunCodeResponse]:
        reqs = [RunCodeRequest(code=f"print({i} ** 2)", language="python") for i in range(24)]
        return await asyncio.gather(*(sandbox_fusion.run_code_async(r) for r in reqs))

    results = asyncio.run(main())
    assert [r.run_result.stdout for r in results] == [f"{i * i}\n" for i in range(24)]


def test_sandbox_fusion_client_rejected_request_is_an_error(endpoint: str) -> None:
    with pytest.raises(Exception, match="422"):
        sandbox_fusion.run_code(RunCodeRequest(code="x", language="swift"), max_attempts=1)


def test_sandbox_fusion_client_endpoint_from_environment(sk_serve: ServeProcess) -> None:
    script = (
        "from sandbox_fusion import run_code, RunCodeRequest\n"
        "r = run_code(RunCodeRequest(code='console.log(1+1)', language='nodejs'), max_attempts=1)\n"
        "print(r.status.value, r.run_result.stdout.strip())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={"SANDBOX_FUSION_ENDPOINT": sk_serve.url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["Success", "2"]


# ---------------------------------------------------------------------------- verl 0.9.1


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


STDIO_CASES = {"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7\n", "0\n"]}


@pytest.mark.parametrize(
    ("code", "score", "statuses"),
    [
        ("a, b = map(int, input().split())\nprint(a + b)", 1.0, {"success"}),
        ("a, b = map(int, input().split())\nprint(a + b + 1)", 0.0, {"wrong_answer"}),
        ("raise ValueError('boom')", 0.0, {"runtime_error"}),
        ("while True:\n    pass", 0.0, {"timeout"}),
    ],
    ids=["correct", "wrong", "runtime_error", "timeout"],
)
def test_verl_compute_score_stdio(sk_serve: ServeProcess, code: str, score: float, statuses: set[str]) -> None:
    result, metadata = verl_reward_score().sandbox_fusion.compute_score(
        sk_serve.run_code_url, threading.Semaphore(8), 256, fenced(code), json.dumps(STDIO_CASES), timeout=2
    )
    assert result == score
    assert {m["status"] for m in metadata} <= statuses, metadata
    if score == 1.0:
        assert [m["stdout"] for m in metadata] == STDIO_CASES["outputs"]


FN_CASES = {"fn_name": "add_all", "inputs": ["[1, 2, 3]", "[]", "[5]\n10"], "outputs": ["6", "0", "15"]}


@pytest.mark.parametrize(
    ("code", "score"),
    [
        ("def add_all(xs, start=0):\n    return start + sum(xs)", 1.0),
        ("def add_all(xs, start=0):\n    return max(xs, default=-1)", 0.0),
        ("class Solution:\n    def add_all(self, xs, start=0):\n        return sum(xs) + start", 1.0),
    ],
    ids=["correct", "wrong", "solution_class"],
)
def test_verl_compute_score_fn_name(sk_serve: ServeProcess, code: str, score: float) -> None:
    result, metadata = verl_reward_score().sandbox_fusion.compute_score(
        sk_serve.run_code_url, threading.Semaphore(8), 256, fenced(code), FN_CASES
    )
    assert result == score, metadata
    assert all(m["api_request_error"] is None for m in metadata), metadata


def test_verl_default_compute_score_reward_path(sk_serve: ServeProcess) -> None:
    """What ``reward.sandbox_fusion.url=http://.../run_code`` runs for a codecontests sample."""
    right = verl_reward_score().default_compute_score(
        "codecontests",
        fenced("print(sum(map(int, input().split())))"),
        json.dumps(STDIO_CASES),
        sandbox_fusion_url=sk_serve.run_code_url,
        concurrent_semaphore=threading.Semaphore(4),
        memory_limit_mb=512,
    )
    wrong = verl_reward_score().default_compute_score(
        "codecontests",
        fenced("print(42)"),
        json.dumps(STDIO_CASES),
        sandbox_fusion_url=sk_serve.run_code_url,
        concurrent_semaphore=threading.Semaphore(4),
        memory_limit_mb=512,
    )
    assert right == 1.0
    assert wrong == 0.0


# ---------------------------------------------------------------------------- verl's tool path


async def test_verl_tool_through_the_server(sk_serve: ServeProcess) -> None:
    """verl's ``code_interpreter`` tool with the old ``sandbox_fusion_url`` key, called by ToolAgentLoop."""
    from integrations.test_verl_tool import agent_loop, code_call, trajectory
    from sandboxkit.integrations.verl import SandboxTool

    tool = SandboxTool({"type": "native", "sandbox_fusion_url": sk_serve.run_code_url, "stateful": False})
    loop = agent_loop([tool])
    try:
        calls = [loop._call_tool(code_call(f"print({i} * 3)"), {}, trajectory(f"r{i}")) for i in range(12)]
        answers = await asyncio.gather(*calls)
        assert [text.text.strip() for text, _, _ in answers] == [str(i * 3) for i in range(12)]
        failed, _, metrics = await loop._call_tool(code_call("raise SystemExit(3)"), {}, trajectory("bad"))
        assert metrics["status"] == "failed", failed.text
    finally:
        tool.close()
