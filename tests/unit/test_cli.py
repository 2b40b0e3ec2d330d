"""The command line: exit codes, JSON output, clear errors (on the real subprocess backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from sandboxkit.cli._smoke import docker_promised, hello_program, host_promised
from sandboxkit.configs import SubprocessConfig

SK = [sys.executable, "-m", "sandboxkit.cli"]


def sk(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, input=stdin, timeout=120)


def test_run_prints_output_and_exits_with_the_program_code() -> None:
    ok = sk("run", "-c", "print(6 * 7)")
    assert (ok.returncode, ok.stdout) == (0, "42\n")
    failed = sk("run", "-c", "import sys; print('x'); sys.exit(7)")
    assert (failed.returncode, failed.stdout) == (7, "x\n")


def test_run_json_is_a_run_result() -> None:
    out = sk("run", "--json", "-c", "print(input()[::-1])", "--stdin", "abc")
    data = json.loads(out.stdout)
    assert data["status"] == "ok" and data["stdout"] == "cba\n" and data["backend"] == "subprocess"


def test_run_timeout_and_compile_error() -> None:
    slow = sk("run", "-c", "while True: pass", "--timeout", "1")
    assert slow.returncode == 124
    bad = sk("run", "-l", "c", "-c", "int main( {")
    assert bad.returncode == 1 and "error" in bad.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("run", "-l", "cobol", "-c", "x"), "unknown language 'cobol'"),
        (("run", "-b", "nope", "-c", "x"), "installed backends"),
        (("run", "--timeout", "-1", "-c", "x"), "timeout"),
        (("run",), "exactly one of FILE or -c"),
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(args: tuple[str, ...], needle: str) -> None:
    out = sk(*args)
    assert out.returncode == 2
    assert needle in " ".join(out.stderr.split())


def test_backends_lists_usability_and_reasons() -> None:
    rows = {r["name"]: r for r in json.loads(sk("backends", "--json").stdout)}
    assert rows["subprocess"]["usable"] is True
    assert rows["sandbox_fusion"]["usable"] is False and "SANDBOX_FUSION_URL" in rows["sandbox_fusion"]["reason"]


def test_doctor_reports_toolchains() -> None:
    out = sk("doctor")
    assert out.returncode == 0
    assert "python" in out.stdout and "toolchains" in out.stdout


def test_bench_pool_prints_a_table_and_saves_a_plot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    png, js = tmp_path / "bench.png", tmp_path / "bench.json"
    out = sk("bench", "pool", "--quick", "--plot", str(png), "--json", str(js))
    assert out.returncode == 0, out.stderr
    assert "pool overhead per call" in out.stdout
    rows = json.loads(js.read_text())
    overhead = next(r for r in rows if r["case"] == "pool overhead per call")
    assert overhead["median_ms"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sk("bench", "nope").returncode == 2


def test_backend_options_are_checked_against_the_config() -> None:
    typo = sk("run", "-o", "disk_mbb=64", "-c", "print(1)")
    assert typo.returncode == 2
    message = " ".join(typo.stderr.split())
    assert "unknown option 'disk_mbb'" in message and "did you mean 'disk_mb'" in message
    assert f"Valid options: {', '.join(SubprocessConfig.option_names())}" in message
    ok = sk("run", "-o", "warm_python=false", "--backend-option", "tmp_mb=32", "-c", "print(6 * 7)")
    assert (ok.returncode, ok.stdout) == (0, "42\n"), ok.stderr


def test_backends_json_lists_each_backends_options() -> None:
    rows = {r["name"]: r for r in json.loads(sk("backends", "--json").stdout)}
    assert "image" in rows["docker"]["options"] and "url" in rows["sandbox_fusion"]["options"]
    assert rows["subprocess"]["options"] == SubprocessConfig.option_names()


def test_serve_checks_backend_options_before_serving() -> None:
    out = sk("serve", "--port", "0", "-b", "sandbox_fusion", "-o", "urll=http://127.0.0.1:1")
    assert out.returncode == 2
    message = " ".join(out.stderr.split())
    assert "unknown option 'urll' (did you mean 'url'?)" in message and "Valid options:" in message


def test_doctor_strict_passes_where_the_toolchains_run() -> None:
    out = sk("doctor", "--strict", "--no-docker", "-l", "python", "-l", "c")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every promised toolchain ran" in out.stdout


def test_doctor_strict_runs_each_toolchain_and_names_the_broken_ones() -> None:
    # A sandbox PATH (outside /tmp, which each sandbox has its own of) with a working python3, a perl that is
    # installed but broken, and no lua: presence alone would call perl fine; running it shows it is not.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as bindir:
        os.chmod(bindir, 0o755)  # sandboxes run as other users
        os.symlink("/usr/bin/python3", f"{bindir}/python3")  # the system one, as SANDBOX_PATH has
        with open(f"{bindir}/perl", "w") as perl:
            perl.write('#!/bin/sh\necho "perl: broken install" >&2\nexit 3\n')
        os.chmod(f"{bindir}/perl", 0o755)
        out = sk("doctor", "--strict", "--no-docker", "-l", "python", "-l", "perl", "-l", "lua", "-o", f"path={bindir}")
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, text
    assert "problem: perl on subprocess: failed (exit 3): perl: broken install" in text
    assert "problem: lua on subprocess:" in text and "apt-get install lua5.4" in text
    assert "python on" not in text and "doctor --strict: 2 problem(s)" in text


def test_doctor_strict_refuses_an_unknown_language() -> None:
    out = sk("doctor", "--strict", "--no-docker", "-l", "cobol")
    assert out.returncode == 2 and "unknown language 'cobol'" in " ".join(out.stderr.split())


def test_every_promised_language_has_a_program_that_proves_it() -> None:
    for name in host_promised():
        assert hello_program(name).strip(), name
    assert "julia" not in host_promised()  # unavailable languages are not promised


def test_the_docker_image_promises_what_its_label_lists() -> None:
    label = "python3-minimal,bash,gcc,g++,nodejs,default-jdk-headless,php-cli,npm:tsx@4.7.1,npm:jest@29.7.0"
    promised = docker_promised(label)
    assert {"python", "c", "java", "php", "typescript", "jest"} <= set(promised)
    assert not {"rust", "r", "junit", "ruby"} & set(promised)
    assert "typescript" not in docker_promised(label.replace("npm:", "x-"))  # no npm tree, no typescript


#: Registers a backend whose SDK is not installed, as on a core-only install (``pip install sandboxkit``), with
#: the real ``daytona`` extra name, then runs the command line in the same process.
_CORE_ONLY = (
    "import sys\n"
    "from sandboxkit.registry import BackendSpec, register\n"
    "register(BackendSpec(name='ghost', factory='ghost_sdk_xyz:Ghost', extra='daytona', modules=('ghost_sdk_xyz',),"
    " summary='a [bold]cloud[/bold] backend'))\n"
    "from sandboxkit.cli import main\n"
    "sys.argv = ['sandboxkit', *sys.argv[1:]]\n"
    "main()\n"
)


def sk_core_only(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}  # one table row per line: the hint is not wrapped
    return subprocess.run(
        [sys.executable, "-c", _CORE_ONLY, *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize("args", [("backends",), ("doctor", "--no-docker")])
def test_install_hints_keep_their_brackets(args: tuple[str, ...]) -> None:
    # rich read "[daytona]" as markup and printed: run: pip install "sandboxkit" (issue 32.4)
    out = sk_core_only(*args)
    assert out.returncode == 0, out.stderr
    assert 'run: pip install "sandboxkit[daytona]"' in out.stdout
    if args == ("backends",):
        assert "a [bold]cloud[/bold] backend" in out.stdout  # a plugin's summary is text, not markup


def test_errors_keep_their_brackets() -> None:
    unusable = sk_core_only("run", "-b", "ghost", "-c", "print(1)")
    assert unusable.returncode == 3
    assert 'pip install "sandboxkit[daytona]"' in " ".join(unusable.stderr.split())
    unreadable = sk("run", "/nonexistent/[bold]solution.py")
    assert unreadable.returncode == 2 and "'/nonexistent/[bold]solution.py'" in unreadable.stderr


def test_run_names_a_status_that_is_not_the_programs_exit() -> None:
    slow = sk("run", "-c", "while True: pass", "--timeout", "1")
    assert slow.returncode == 124 and "[timeout]" in slow.stderr  # rich took "[timeout]" for a style tag


def test_doctor_strict_fails_on_a_missing_protection() -> None:
    # bootstrap sets up every isolation mechanism: a sandbox without one (here its seccomp filter) is a failed set-up
    out = sk("doctor", "--strict", "--no-docker", "-l", "python", "-o", "seccomp=false")
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, text
    assert "problem: subprocess sandbox: missing protection: seccomp filter: off" in text
