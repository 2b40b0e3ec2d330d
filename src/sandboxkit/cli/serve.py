"""``sandboxkit grade``: placeholder until the judge lands (issue #4)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command to ``app``."""
