"""``sandboxkit run``, ``backends``, ``doctor`` and ``cleanup``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from rich.console import Console
from rich.table import Table

from sandboxkit.cli._common import EXIT_USAGE, BackendOptionArg, backend_options, err_console, fail
from sandboxkit.errors import InvalidRequest, SandboxkitError
from sandboxkit.models import Status

console = Console()


def register(app: typer.Typer) -> None:
    """Add the commands to ``app``."""
    app.command("run")(run)
    app.command("backends")(backends)
    app.command("doctor")(doctor)
    app.command("cleanup")(cleanup)


def run(
    file: Annotated[Path | None, typer.Argument(help="Source file to run (or use -c).")] = None,
    code: Annotated[str | None, typer.Option("-c", "--code", help="Program text.")] = None,
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend name.")] = "subprocess",
    language: Annotated[str, typer.Option("--language", "-l", help="Language name or alias.")] = "python",
    stdin: Annotated[str | None, typer.Option("--stdin", help="Text fed to the program ('-' reads ours).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", "-t", help="Wall-clock limit in seconds.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the RunResult as JSON (never streams).")] = False,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream/--no-stream",
            help="Print output as the program writes it (default), or all at once when it ends.",
        ),
    ] = True,
    backend_option: BackendOptionArg = None,
) -> None:
    """Run one program and print its output; exit with its exit code.

    Output is streamed to the terminal as the program writes it (on a backend that streams;
    others print it when the program ends), so a long program can be watched.
    """
    from sandboxkit.pool import SandboxPool

    if (file is None) == (code is None):
        err_console.print("error: give exactly one of FILE or -c CODE")
        raise typer.Exit(EXIT_USAGE)
    if file is not None:
        try:
            code = file.read_text()
        except OSError as exc:
            err_console.print(f"error: cannot read {str(file)!r}: {exc.strerror}")
            raise typer.Exit(EXIT_USAGE) from exc
    if stdin == "-":
        stdin = sys.stdin.read()
    assert code is not None
    options = backend_options(backend, backend_option)
    live = stream and not as_json
    out, err = _Echo(sys.stdout), _Echo(sys.stderr)

    async def go() -> object:
        async with SandboxPool(backend, max_concurrency=1, backend_options=options) as pool:
            if not live:
                return await pool.run(code, language=language, stdin=stdin, timeout=timeout)
            return await pool.run(code, language=language, stdin=stdin, timeout=timeout, on_stdout=out, on_stderr=err)

    try:
        result = asyncio.run(go())
    except SandboxkitError as exc:
        fail(exc)
    from sandboxkit.models import RunResult

    assert isinstance(result, RunResult)
    if as_json:
        print(result.model_dump_json(indent=2))
        raise typer.Exit(0)
    if result.compile is not None and result.status is Status.COMPILE_ERROR:
        sys.stderr.write(result.compile.stderr or result.compile.stdout)
        raise typer.Exit(1)
    if not live:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
    if result.status is not Status.OK and result.status is not Status.FAILED:
        err_console.print(f"[{result.status.value}]", highlight=False)
    code_out = result.exit_code if result.exit_code is not None else 1
    raise typer.Exit(code_out if result.status is not Status.TIMEOUT else 124)


class _Echo:
    """Writes streamed chunks straight to one of our own streams, flushed, as raw bytes.

    Raw bytes (not text) because a chunk may end inside a multi-byte character; the terminal
    joins them. A closed pipe (``sandboxkit run ... | head``) stops the echo quietly; the
    program's result and exit code are unaffected.
    """

    def __init__(self, stream: object) -> None:
        self._stream: BinaryIO | None = getattr(stream, "buffer", None)
        self._text = stream

    def __call__(self, data: bytes) -> None:
        target = self._stream
        if target is None:  # a text-only stream (captured by a test harness)
            write = getattr(self._text, "write", None)
            if write is not None:
                write(data.decode("utf-8", "replace"))
            return
        try:
            target.write(data)
            target.flush()
        except (BrokenPipeError, ValueError):  # reader gone, or stream closed
            self._stream = None
            self._text = None


def backends(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List installed backends, whether each is usable here, and why not."""
    from sandboxkit.registry import available_backends

    rows = []
    for name, spec in available_backends().items():
        avail = spec.availability()
        try:
            model = spec.load_config()
        except SandboxkitError:
            model = None
        rows.append(
            {
                "name": name,
                "usable": avail.usable,
                "reason": avail.reason,
                "extra": spec.extra or "",
                "plugin": spec.plugin,
                "summary": spec.summary,
                "options": model.option_names() if model is not None else None,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="sandboxkit backends")
    for col in ("backend", "usable", "why not / install", "summary"):
        table.add_column(col)
    for row in rows:
        reason = str(row["reason"])
        table.add_row(str(row["name"]), "[green]yes[/]" if row["usable"] else "[red]no[/]", reason, str(row["summary"]))
    console.print(table)


def doctor(
    docker: Annotated[
        bool,
        typer.Option("--docker/--no-docker", help="Also check the Docker image's toolchains (starts a container)."),
    ] = True,
) -> None:
    """Check this machine: backends, isolation mechanisms, and every language's toolchain inside the sandboxes."""
    from sandboxkit.registry import available_backends

    console.print(f"[bold]python[/] {sys.version.split()[0]}")
    for name, spec in available_backends().items():
        avail = spec.availability()
        mark = "[green]ok[/]" if avail.usable else "[red]unusable[/]"
        console.print(f"[bold]backend {name}[/]: {mark} {avail.reason}")
        if avail.usable and name == "subprocess":
            try:
                from sandboxkit.registry import backend as make

                caps = make(name).capabilities
                for gap in caps.missing_protections:
                    console.print(f"  [yellow]missing protection[/]: {gap}")
                if not caps.missing_protections:
                    console.print("  all isolation mechanisms available")
                for note in caps.notes:
                    console.print(f"  [green]in force[/]: {note}")
                console.print(f"  languages inside the sandbox: {', '.join(sorted(caps.languages))}")
            except SandboxkitError as exc:
                console.print(f"  [red]{exc}[/]")
    _language_table(docker)


def _language_table(docker: bool) -> None:
    """Every language, and whether its toolchain is present inside each local sandbox."""
    from sandboxkit.cli._languages import docker_languages, how_to_get, subprocess_languages
    from sandboxkit.languages import LANGUAGES

    columns = {"subprocess sandbox": subprocess_languages()}
    if docker:
        columns["docker image"] = docker_languages()
    table = Table(title="toolchains inside the sandboxes (languages)")
    for col in ("language", "Sandbox Fusion name", *columns, "install"):
        table.add_column(col)
    missing_any: set[str] = set()
    for name, lang in LANGUAGES.items():
        cells = []
        for found in columns.values():
            if isinstance(found, str):
                cells.append("[yellow]not checked[/]")
            elif found[name]:
                cells.append("[green]ok[/]")
            else:
                cells.append("[red]missing[/]")
                missing_any.add(name)
        table.add_row(name, lang.sandbox_fusion, *cells, how_to_get(lang) if name in missing_any else "")
    console.print(table)
    for name in sorted(missing_any):
        if LANGUAGES[name].unavailable:
            console.print(f"  {name}: not installed by scripts/bootstrap.sh: {LANGUAGES[name].unavailable}")
    for title, found in columns.items():
        if isinstance(found, str):
            console.print(f"[yellow]{title} not checked[/]: {found}")


def cleanup(
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend whose leftovers to remove.")] = "subprocess",
    backend_option: BackendOptionArg = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Also remove sandboxes whose owning process is still running (docker)."),
    ] = False,
) -> None:
    """Remove the sandboxes that crashed sandboxkit processes left behind (live processes' are kept)."""
    import inspect

    from sandboxkit.registry import backend as make

    options = backend_options(backend, backend_option)

    async def go() -> int:
        b = make(backend, **options)
        try:
            remove: Any = b.cleanup  # --force is an extra keyword of backends that spare live owners
            if not force:
                return int(await remove())
            if "force" not in inspect.signature(remove).parameters:
                raise InvalidRequest(
                    f"--force is not supported by {backend!r}: its cleanup already removes everything it may",
                    backend=backend,
                )
            return int(await remove(force=True))
        finally:
            await b.aclose()

    try:
        removed = asyncio.run(go())
    except InvalidRequest as exc:
        fail(exc)
    except SandboxkitError as exc:
        fail(exc)
    console.print(f"removed {removed} sandbox(es) left by {backend}")
