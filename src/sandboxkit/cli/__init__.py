"""The ``sandboxkit`` command line. Each subcommand lives in its own module and is imported lazily.

Exit codes: the program's own exit code for ``run``; 0 for ``grade`` even when programs fail;
2 for usage errors (bad arguments, unknown backend or language); 3 for infrastructure errors.
"""

from __future__ import annotations

import typer

from sandboxkit.cli import bench, grade, local, serve

__all__ = ["app", "main"]

app = typer.Typer(
    name="sandboxkit",
    help="Run untrusted, model-written code safely and fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
local.register(app)
grade.register(app)
serve.register(app)
bench.register(app)


def main() -> None:
    """Console entry point."""
    app(prog_name="sandboxkit")


if __name__ == "__main__":  # pragma: no cover
    main()
