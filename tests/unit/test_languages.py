"""The language table: Sandbox Fusion's names, the uninstallable languages' hints, the PHP tag rule."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sandboxkit.errors import InvalidRequest
from sandboxkit.languages import LANGUAGES, resolve_language, sandbox_fusion_name
from sandboxkit.protocols.sandbox_fusion import SANDBOX_FUSION_LANGUAGES
from support.marks import missing


@pytest.mark.parametrize("sf_name", SANDBOX_FUSION_LANGUAGES)
def test_every_sandbox_fusion_language_name_resolves_and_maps_back(sf_name: str) -> None:
    lang = resolve_language(sf_name)
    assert lang.sandbox_fusion == sf_name
    assert sandbox_fusion_name(lang.name) == sf_name


def test_names_are_case_insensitive() -> None:
    assert resolve_language("r") is resolve_language("R") is LANGUAGES["r"]
    assert resolve_language("d_ut") is resolve_language("D_ut") is LANGUAGES["d"]


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidRequest, match=r"use one of: .*kotlin"):
        resolve_language("cobol")


@pytest.mark.parametrize("name", sorted(n for n, lang in LANGUAGES.items() if lang.unavailable))
def test_uninstallable_languages_say_what_to_install(name: str) -> None:
    lang = LANGUAGES[name]
    assert lang.install and lang.install_hint == lang.install  # a real hint, not a guessed apt package
    assert lang.unavailable and lang.binaries


def test_sandbox_fusion_commands_and_flags() -> None:
    """The flags Sandbox Fusion's runners pass, which change verdicts, are passed here too."""
    assert LANGUAGES["java"].run_argv("public class Main {}")[:2] == ["java", "-ea"]
    assert LANGUAGES["d"].compile_argv("void main() {}") == ["ldmd2", "main.d", "-unittest", "-of=main"]
    assert LANGUAGES["verilog"].compile_argv("") == [
        "iverilog", "-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb", "-o", "test.vvp", "main.sv",
    ]  # fmt: skip
    assert LANGUAGES["php"].run_argv("") == ["php", "-f", "main.php"]
    assert LANGUAGES["pytest"].run_argv("") == ["pytest", "test_main.py"]
    assert LANGUAGES["go_test"].run_argv("") == ["go", "test", "main_test.go"]
    assert LANGUAGES["scala"].run_argv("object Sol { }")[-1] == "Sol"
    assert LANGUAGES["junit"].source_name("public class AddTest {}") == "AddTest.java"
    assert "--scan-class-path" in LANGUAGES["junit"].run_argv("")


@pytest.mark.parametrize(
    ("code", "written"),
    [
        ('echo "x";', '<?php\necho "x";'),
        ('  \n<?php echo "x";', '<?php echo "x";'),
    ],
)
def test_php_gets_its_open_tag_as_in_sandbox_fusion(code: str, written: str) -> None:
    assert LANGUAGES["php"].prepare(code) == written
    assert LANGUAGES["python"].prepare(code) == code


def test_the_sandbox_python_imports_the_preinstalled_packages() -> None:
    # The subprocess sandbox runs the system python3, not the venv: the preinstalled packages live there.
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        missing("no /usr/bin/python3")
    done = subprocess.run([python, "-c", "import numpy, requests"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        missing(f"python3-numpy / python3-requests not installed: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr


def test_doctor_lists_every_language_with_its_toolchain_state() -> None:
    from typer.testing import CliRunner

    from sandboxkit.backends.subprocess import SubprocessBackend
    from sandboxkit.cli import app

    result = CliRunner().invoke(app, ["doctor", "--no-docker"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    backend = SubprocessBackend()
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") >= 5}
    for name, lang in LANGUAGES.items():
        assert name in rows, f"{name} missing from doctor's table"
        state = "ok" if backend.has_toolchain(lang) else "missing"
        assert rows[name].split("│")[3].strip() == state, rows[name]
        if lang.unavailable and state == "missing":
            assert lang.unavailable in result.output.replace("\n", " ")
