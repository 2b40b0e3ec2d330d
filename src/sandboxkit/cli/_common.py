"""Helpers shared by the CLI subcommands: exit codes and error printing."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

from sandboxkit.errors import InvalidRequest, SandboxError

EXIT_USAGE = 2
EXIT_INFRA = 3

err_console = Console(stderr=True)


def fail(exc: SandboxError) -> NoReturn:
    """Print an infrastructure or usage error and exit with the matching code."""
    code = EXIT_USAGE if isinstance(exc, InvalidRequest) else EXIT_INFRA
    err_console.print(f"[bold red]error[/]: {exc}", highlight=False, markup=True)
    raise typer.Exit(code)
