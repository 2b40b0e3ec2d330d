"""Helpers shared by the CLI subcommands: exit codes, error printing, backend options.

Every message that shows a value (an error, a path, an install hint, a program's output) escapes it with
``rich.markup.escape`` or prints with ``markup=False``: rich reads ``[word]`` as a style tag and drops it,
which turned ``pip install "sandboxkit[daytona]"`` into ``pip install "sandboxkit"`` (issue 32.4).
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from sandboxkit.errors import InvalidRequest, SandboxkitError

EXIT_USAGE = 2
EXIT_INFRA = 3

err_console = Console(stderr=True)


def fail(exc: SandboxkitError) -> NoReturn:
    """Print an infrastructure or usage error and exit with the matching code."""
    code = EXIT_USAGE if isinstance(exc, InvalidRequest) else EXIT_INFRA
    err_console.print(f"[bold red]error[/]: {escape(str(exc))}", highlight=False)
    raise typer.Exit(code)


#: The ``--backend-option KEY=VALUE`` option, the same on every subcommand that names a backend.
BackendOptionArg = Annotated[
    list[str] | None,
    typer.Option(
        "--backend-option",
        "-o",
        help="KEY=VALUE option of the backend, checked against its config (repeatable; VALUE may be JSON).",
    ),
]


def backend_options(backend: str, items: list[str] | None) -> dict[str, Any]:
    """``--backend-option`` values validated against ``backend``'s config; a bad one exits 2 naming the valid keys."""
    from sandboxkit.registry import parse_backend_options

    try:
        return parse_backend_options(backend, items or [])
    except SandboxkitError as exc:
        fail(exc)
