"""``sandboxkit doctor --strict`` proves each bundled library by running a program that imports it.

A library that is missing where programs run makes every correct answer using it score 0, so a set-up that
lacks one must fail its own check, by name, even when the language's toolchain itself works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from sandboxkit.cli._libraries import LIBRARIES, carried_by_image
from sandboxkit.cli._smoke import host_promised


def sk(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "sandboxkit.cli", *args], capture_output=True, text=True, timeout=600, env=env
    )


def test_a_missing_library_fails_the_strict_check_by_name() -> None:
    # A sandbox PATH whose perl runs, but finds a Data::Compare that dies on load: the toolchain row passes,
    # the library row does not.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as bindir:
        os.makedirs(f"{bindir}/lib/Data")
        with open(f"{bindir}/lib/Data/Compare.pm", "w") as module:
            module.write('die "Data::Compare is not installed\\n";\n')
        with open(f"{bindir}/perl", "w") as perl:
            perl.write(f'#!/bin/sh\nexec /usr/bin/perl -I{bindir}/lib "$@"\n')
        os.symlink("/usr/bin/python3", f"{bindir}/python3")  # the fork server's, as SANDBOX_PATH has
        for path in (bindir, f"{bindir}/lib", f"{bindir}/lib/Data", f"{bindir}/lib/Data/Compare.pm"):
            os.chmod(path, 0o755)  # sandboxes run as other users
        os.chmod(f"{bindir}/perl", 0o755)
        out = sk("doctor", "--strict", "--no-docker", "-l", "perl", "-o", f"path={bindir}")
        # The plain bootstrap promises toolchains, not the bundled libraries: it checks without them.
        plain = sk("doctor", "--strict", "--no-docker", "--no-libraries", "-l", "perl", "-o", f"path={bindir}")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "Data::Compare" not in plain.stdout, plain.stdout
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, text
    assert "problem: perl: Data::Compare on subprocess: failed (exit 255): Data::Compare is not installed" in text
    assert "problem: perl on subprocess" not in text and "doctor --strict: 1 problem(s)" in text


def test_every_library_has_a_program_and_a_promised_language() -> None:
    for lib in LIBRARIES:
        assert lib.code().strip(), lib
        assert lib.language in host_promised(), lib


def test_the_image_carries_the_libraries_its_label_lists() -> None:
    label = "python3-minimal,perl,libdata-compare-perl,go:github.com/stretchr/testify=v1.8.1,go:gopkg.in/yaml.v3=v3.0.1"
    carried = {lib.name for lib in LIBRARIES if carried_by_image(lib, label)}
    assert carried == {"Data::Compare", "testify"}
    assert not any(carried_by_image(lib, "go:github.com/stretchr/testifyx=v1") for lib in LIBRARIES)
