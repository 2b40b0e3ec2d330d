"""README's two set-up commands exist, and CI runs exactly the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = _bash_blocks(readme)
    main_job, test_cmd = blocks[0], blocks[1]
    assert "sandboxkit grade examples/problems.jsonl" in main_job
    assert "pytest" in test_cmd and "bootstrap.sh --all" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines(), "CI must call the README's test command verbatim"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but ``-``/``_`` dropped, spaces to ``-``."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_docs_pages_linked_from_readme_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\((docs/[^)]+)\)", readme):
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links to missing {path}"
        if anchor:
            assert anchor in _anchors((ROOT / path).read_text()), f"README links to a missing heading: {link}"


def test_bootstrap_installs_no_test_plugin_for_users() -> None:
    # A user's `sandboxkit backends` must not list the echo test backend; tests install it themselves
    # (tests/support/plugin_dist.py).
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    install_lines = [line for line in bootstrap.splitlines() if "$PIP" in line and not line.lstrip().startswith("#")]
    assert install_lines and not any("tests/plugin" in line for line in install_lines)
