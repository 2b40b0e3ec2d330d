"""The option tables in docs/ are rendered from the config models: a table never says what the model does not."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

import pytest

from sandboxkit import configs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("option_tables", ROOT / "scripts" / "option-tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tables() -> dict[str, str]:
    """Every doc page with a rendered table, by path relative to the repository."""
    pages = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}
    return {path: text for path, text in pages.items() if "<!-- options-table:" in text}


@pytest.mark.parametrize("page", sorted(_tables()))
def test_each_option_table_is_what_its_model_renders(page: str) -> None:
    text = _tables()[page]
    assert _script().render(text) == text, (
        f"{page} differs from its config; run: PYTHONPATH=src scripts/option-tables.py"
    )


def test_every_backend_that_takes_a_config_has_its_table() -> None:
    rendered = {m[2] for text in _tables().values() for m in _script().TABLE.finditer(text)}
    expected = {"SubprocessConfig", "DockerConfig", "SandboxFusionConfig", "DaytonaConfig", "E2BConfig"}
    assert expected <= rendered


def test_a_table_shows_every_option_with_its_default_and_meaning() -> None:
    table = configs.options_table(configs.DockerConfig)
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[0].strip("| `") for row in rows] == [
        n for n in configs.DockerConfig.model_fields if n != "kind"
    ]
    assert "| `workdir_size_mb` | `512` | Size of the workspace tmpfs in MiB" in table
    assert "| `image` | – | Image to run (default: `$SANDBOXKIT_DOCKER_IMAGE`" in table  # None: the meaning says
