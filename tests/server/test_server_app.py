"""The /run_code app in-process (httpx.ASGITransport), on the real subprocess backend.

Each test reads as a statement of Sandbox Fusion's contract or of what sandboxkit adds.
"""

from __future__ import annotations

import base64
import json

import pytest

from sandboxkit.models import Limits
from support.marks import missing
from support.serve import AppClient

HELLO = {"code": "print('Hello, world!')", "language": "python"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_ping_docs_and_openapi_use_sandbox_fusion_names(app_client: AppClient) -> None:
    async with app_client() as client:
        ping = await client.get("/v1/ping")
        assert ping.status_code == 200 and ping.json() == "pong"
        assert (await client.get("/docs")).status_code == 200
        schema = (await client.get("/openapi.json")).json()
        assert "/run_code" in schema["paths"]
        request_fields = set(schema["components"]["schemas"]["RunCodeRequest"]["properties"])
        assert request_fields == {
            "compile_timeout",
            "run_timeout",
            "memory_limit_MB",
            "code",
            "stdin",
            "language",
            "files",
            "fetch_files",
        }
        response_fields = set(schema["components"]["schemas"]["RunCodeResponse"]["properties"])
        assert {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"} <= response_fields
        # Every endpoint with a body passes the same admission, so each documents its refusals.
        for path in ("/run_code", "/run_jupyter"):
            assert {"408", "413", "504"} <= set(schema["paths"][path]["post"]["responses"]), path


async def test_hello_world_matches_sandbox_fusion_sample(app_client: AppClient) -> None:
    async with app_client() as client:
        resp = await client.post("/run_code", json=HELLO)
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "Success" and body["message"] == ""
    assert body["compile_result"] is None
    assert body["run_result"]["status"] == "Finished"
    assert body["run_result"]["return_code"] == 0
    assert body["run_result"]["stdout"] == "Hello, world!\n"
    assert body["run_result"]["stderr"] == ""
    assert isinstance(body["run_result"]["execution_time"], float)
    assert body["files"] == {} and body["executor_pod_name"] is None


async def test_stdin_nonzero_exit_and_timeout(app_client: AppClient) -> None:
    async with app_client() as client:
        echo = await client.post(
            "/run_code", json={"code": "print(input()[::-1])", "language": "python", "stdin": "abc"}
        )
        fail = await client.post("/run_code", json={"code": "import sys; sys.exit(3)", "language": "python"})
        slow = await client.post(
            "/run_code",
            json={
                "code": "import time; print('x', flush=True); time.sleep(5)",
                "language": "python",
                "run_timeout": 0.5,
            },
        )
    assert echo.json()["run_result"]["stdout"] == "cba\n"
    assert fail.status_code == 200
    assert fail.json()["status"] == "Failed" and fail.json()["run_result"]["return_code"] == 3
    body = slow.json()
    assert slow.status_code == 200 and body["status"] == "Failed"
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["return_code"] is None
    assert body["run_result"]["stdout"] == "x\n"  # output before the kill is kept


async def test_compiled_language_compile_error_has_null_run_result(app_client: AppClient) -> None:
    async with app_client() as client:
        ok = await client.post(
            "/run_code",
            json={
                "code": '#include <cstdio>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}',
                "language": "cpp",
                "stdin": "2 3",
            },
        )
        bad = await client.post("/run_code", json={"code": "int main( {", "language": "cpp"})
    assert ok.json()["status"] == "Success"
    assert ok.json()["compile_result"]["status"] == "Finished" and ok.json()["compile_result"]["return_code"] == 0
    assert ok.json()["run_result"]["stdout"] == "5\n"
    body = bad.json()
    assert body["status"] == "Failed"
    assert body["compile_result"]["return_code"] != 0 and "error" in body["compile_result"]["stderr"]
    assert body["run_result"] is None


async def test_files_in_and_fetch_files_out(app_client: AppClient) -> None:
    code = "print(open('data/in.txt').read().upper()); open('out.bin','wb').write(bytes([0,255,1]))"
    async with app_client() as client:
        resp = await client.post(
            "/run_code",
            json={
                "code": code,
                "language": "python",
                "files": {"data/in.txt": b64("hi"), "skipped.txt": None},
                "fetch_files": ["out.bin", "missing.txt"],
            },
        )
    body = resp.json()
    assert body["run_result"]["stdout"] == "HI\n"
    assert body["files"] == {"out.bin": base64.b64encode(bytes([0, 255, 1])).decode()}  # missing ones omitted


async def test_memory_limit_is_applied(app_client: AppClient) -> None:
    hog = "x = bytearray(400 * 1024 * 1024); print('allocated')"
    async with app_client() as client:
        small = await client.post("/run_code", json={"code": hog, "language": "python", "memory_limit_MB": 128})
    body = small.json()
    assert body["status"] == "Failed"
    assert "allocated" not in (body["run_result"]["stdout"] or "")


async def test_output_over_the_cap_keeps_head_and_tail_and_is_flagged(app_client: AppClient) -> None:
    flood = "import sys\nfor _ in range(64): sys.stdout.write('y' * 16384)\nprint('end')"
    async with app_client(limits=Limits(output_bytes=64 * 1024)) as client:
        resp = await client.post("/run_code", json={"code": flood, "language": "python"})
    body = resp.json()
    assert resp.status_code == 200
    assert body["status"] == "Success", body["message"]  # a long output is not a failure
    assert body["sandboxkit_status"] == "ok"
    assert body["run_result"]["stdout_truncated"] is True
    stdout = body["run_result"]["stdout"]
    assert stdout.startswith("y" * 1000) and stdout.endswith("y" * 1000 + "end\n")
    assert "bytes cut ...]" in stdout and len(stdout) < 64 * 1024 + 100
    assert "head and the tail are kept" in body["message"]


async def test_ten_megabytes_then_a_traceback_keeps_the_traceback(app_client: AppClient) -> None:
    """Issue 18: a program that prints 10 MB and then raises; stdout and stderr end as the program ended them."""
    code = (
        "import sys\n"
        "sys.stdout.write('o' * 10_000_000 + 'LAST LINE\\n')\n"
        "sys.stderr.write('e' * 10_000_000 + '\\n')\n"
        "def solve():\n    raise KeyError('missing answer')\n"
        "solve()\n"
    )
    async with app_client() as client:
        resp = await client.post("/run_code", json={"code": code, "language": "python", "run_timeout": 30})
    body = resp.json()
    assert body["status"] == "Failed" and body["sandboxkit_status"] == "failed", body["message"]
    run = body["run_result"]
    assert run["return_code"] == 1
    assert run["stdout_truncated"] and run["stderr_truncated"]
    assert run["stdout"].endswith("LAST LINE\n")
    stderr = run["stderr"]
    assert stderr.rstrip().endswith("KeyError: 'missing answer'")
    assert "in solve" in stderr and "Traceback (most recent call last)" in stderr
    assert "sandboxkit" not in stderr.split("bytes cut ...]")[-1]  # issue 13: only the user's frames


async def test_languages_answer_under_sandbox_fusion_names(app_client: AppClient) -> None:
    async with app_client() as client:
        node = await client.post("/run_code", json={"code": "console.log(6*7)", "language": "nodejs"})
        sh = await client.post("/run_code", json={"code": "echo $((6*7))", "language": "bash"})
    assert node.json()["run_result"]["stdout"] == "42\n"
    assert sh.json()["run_result"]["stdout"] == "42\n"


#: Sandbox Fusion's name, a program printing 42 written as its datasets write them, and what a failing
#: assert looks like in that language (the verdict must be Failed, as on Sandbox Fusion).
SF_PROGRAMS = {
    # no <?php: Sandbox Fusion's runner adds it. MultiPL-E's PHP tests throw: php-cli compiles assert() out.
    "php": ('echo 6 * 7, "\\n";', "if (1 !== 2) { throw new Exception('Test failed!'); }"),
    "R": ('cat(6 * 7, "\\n", sep = "")', "stopifnot(1 == 2)"),
    "D_ut": ("import std.stdio;\nvoid main() { writeln(6 * 7); }", "unittest { assert(1 == 2); }\nvoid main() {}"),
    "ruby": ("puts 6 * 7", "raise 'assertion failed' unless 1 == 2"),
    "lua": ("print(6 * 7)", "assert(1 == 2)"),
    "perl": ('print 6 * 7, "\\n";', "die unless 1 == 2;"),
    "typescript": ("const n: number = 6 * 7;\nconsole.log(n);", "import assert from 'assert';\nassert.equal(1, 2);"),
    "java": (
        "public class Main { public static void main(String[] a) { System.out.println(6 * 7); } }",
        "public class Main { public static void main(String[] a) { assert 1 == 2; } }",  # java -ea, as upstream
    ),
}


@pytest.mark.parametrize("sf_name", sorted(SF_PROGRAMS))
async def test_sandbox_fusion_language_names_run_with_its_semantics(app_client: AppClient, sf_name: str) -> None:
    from sandboxkit.languages import resolve_language

    if resolve_language(sf_name).missing_binaries():
        missing(f"{sf_name} toolchain not installed here")
    good, failing = SF_PROGRAMS[sf_name]
    async with app_client() as client:
        ok = (await client.post("/run_code", json={"code": good, "language": sf_name, "run_timeout": 30})).json()
        bad = (await client.post("/run_code", json={"code": failing, "language": sf_name, "run_timeout": 30})).json()
    assert ok["status"] == "Success" and ok["run_result"]["stdout"] == "42\n", ok
    assert bad["status"] == "Failed" and bad["run_result"]["return_code"] != 0, bad


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("payload", "status", "needle"),
    [
        ('{"code": "print(1)", "language": ', 422, "JSON decode error"),
        ('["not", "an", "object"]', 422, "dictionary"),
        ('{"language": "python"}', 422, "code"),
        ('{"code": "x", "language": "cobol"}', 422, "cobol"),
        ('{"code": "x", "language": "swift"}', 422, "is not available"),  # a Sandbox Fusion name this backend lacks
        ('{"code": "x", "language": "python", "files": {"../escape.txt": "eA=="}}', 422, ".."),
        ('{"code": "x", "language": "python", "files": {"/etc/passwd": "eA=="}}', 422, "absolute"),
        ('{"code": "x", "language": "python", "fetch_files": ["../../etc/shadow"]}', 422, ".."),
        ('{"code": "x", "language": "python", "fetch_files": ["/etc/passwd"]}', 422, "absolute"),
        ('{"code": "x", "language": "python", "files": {"a.txt": "not base64!"}}', 422, "base64"),
        ('{"code": "x", "language": "python", "run_timeout": 0}', 422, "run_timeout"),
        ('{"code": "x", "language": "python", "run_timeout": "soon"}', 422, "run_timeout"),
        ('{"code": "x", "language": "python", "run_timeout": -1e9}', 422, "run_timeout"),  # 1e9: lowered (ceilings)
    ],
)
async def test_bad_input_gets_422_with_a_message_and_the_server_keeps_serving(
    app_client: AppClient, payload: str, status: int, needle: str
) -> None:
    async with app_client() as client:
        resp = await client.post("/run_code", content=payload, headers={"content-type": "application/json"})
        assert resp.status_code == status
        assert needle in json.dumps(resp.json()["detail"])
        after = await client.post("/run_code", json=HELLO)
        assert after.status_code == 200 and after.json()["status"] == "Success"


async def test_unknown_language_message_lists_what_the_server_runs(app_client: AppClient) -> None:
    async with app_client() as client:
        resp = await client.post("/run_code", json={"code": "x", "language": "cobol"})
    detail = resp.json()["detail"][0]
    assert detail["loc"] == ["body", "language"]
    assert "python" in detail["msg"] and "nodejs" in detail["msg"] and "subprocess" in detail["msg"]


async def test_huge_body_gets_413_declared_or_streamed(app_client: AppClient) -> None:
    big = json.dumps({"code": "#" * 200_000, "language": "python"}).encode()

    async def chunked():  # no Content-Length: the limit must hold while streaming
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    async with app_client(max_body_bytes=100_000) as client:
        declared = await client.post("/run_code", content=big, headers={"content-type": "application/json"})
        streamed = await client.post("/run_code", content=chunked(), headers={"content-type": "application/json"})
        small = await client.post("/run_code", json=HELLO)
    for resp in (declared, streamed):
        assert resp.status_code == 413
        assert "too large" in resp.json()["detail"] and "100000" in resp.json()["detail"]
    assert small.status_code == 200 and small.json()["status"] == "Success"


async def test_run_code_adds_nothing_of_the_server_to_a_traceback(app_client: AppClient) -> None:
    """Issue 13 item 2, server side: /run_code returns the backend's traceback as is (no server frame or path).

    The backend's own frames are the backend's to remove; here the HTTP answer must equal what the
    pool returned for the same program, once the per-sandbox directory is masked.
    """
    import re

    from sandboxkit.models import RunRequest

    code = "def solve():\n    raise ValueError('wrong')\nsolve()"
    async with app_client() as client:
        over_http = (await client.post("/run_code", json={"code": code, "language": "python"})).json()
        direct = await client.app.state.pool.run(RunRequest(code=code, language="python"))  # type: ignore[attr-defined]

    def masked(text: str) -> str:
        return re.sub(r"/\S*?/(main\.py)", r"<dir>/\1", text)

    stderr = over_http["run_result"]["stderr"]
    assert masked(stderr) == masked(direct.stderr)
    assert stderr.rstrip().endswith("ValueError: wrong")
    for server_part in (
        "sandboxkit/server",
        "sandboxkit/protocols",
        "site-packages",
        "fastapi",
        "uvicorn",
        "starlette",
    ):
        assert server_part not in stderr
