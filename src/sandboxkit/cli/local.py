"""``sandboxkit run``, ``backends``, ``doctor`` and ``cleanup``."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from rich.console import Console
from rich.markup import escape
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
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", "--timeout", "-t", help="Wall-clock limit in seconds.")
    ] = 10.0,
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
            err_console.print(f"error: cannot read {str(file)!r}: {exc.strerror}", markup=False)
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
                return await pool.run(code, language=language, stdin=stdin, timeout_s=timeout_s)
            return await pool.run(
                code, language=language, stdin=stdin, timeout_s=timeout_s, on_stdout=out, on_stderr=err
            )

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
        err_console.print(f"[{result.status.value}]", highlight=False, markup=False)
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
        usable = "[green]yes[/]" if row["usable"] else "[red]no[/]"
        table.add_row(escape(str(row["name"])), usable, escape(str(row["reason"])), escape(str(row["summary"])))
    console.print(table)


def doctor(
    docker: Annotated[
        bool,
        typer.Option("--docker/--no-docker", help="Also check the Docker image's toolchains (starts a container)."),
    ] = True,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Run every toolchain the set-up promised once inside the sandboxes; exit 1 naming each that fails.",
        ),
    ] = False,
    language: Annotated[
        list[str] | None,
        typer.Option("--language", "-l", help="With --strict: run only this language (repeatable)."),
    ] = None,
    backend_option: Annotated[
        list[str] | None,
        typer.Option(
            "--backend-option", "-o", help="With --strict: KEY=VALUE option of the subprocess sandboxes (repeatable)."
        ),
    ] = None,
    libraries: Annotated[
        bool,
        typer.Option(
            "--libraries/--no-libraries",
            help="With --strict: also prove the libraries Sandbox Fusion's image bundles (bootstrap.sh --all "
            "installs them on the host; the plain bootstrap does not promise them).",
        ),
    ] = True,
) -> None:
    """Check this machine: backends, isolation mechanisms, and every language's toolchain inside the sandboxes.

    With ``--strict`` (what ``scripts/bootstrap.sh`` ends with) presence is not enough: each promised
    toolchain runs a program through a sandbox, and any failure, or an unusable backend, exits 1.
    """
    from sandboxkit.registry import available_backends

    only = _languages_named(language or [])
    options = backend_options("subprocess", backend_option)

    console.print(f"[bold]python[/] {sys.version.split()[0]}")
    for name, spec in available_backends().items():
        avail = spec.availability()
        mark = "[green]ok[/]" if avail.usable else "[red]unusable[/]"
        console.print(f"[bold]backend {escape(name)}[/]: {mark} {escape(avail.reason)}")
        if avail.usable and name == "subprocess":
            try:
                from sandboxkit.registry import backend as make

                made = make(name)
                caps = made.capabilities
                for gap in caps.missing_protections:
                    console.print(f"  [yellow]missing protection[/]: {escape(gap)}")
                if not caps.missing_protections:
                    console.print("  all isolation mechanisms available")
                for note in caps.notes:
                    console.print(f"  [green]in force[/]: {escape(note)}")
                console.print(f"  languages inside the sandbox: {', '.join(sorted(caps.languages))}")
                from sandboxkit.kernel import describe_shell

                kernel_shell = describe_shell(getattr(made, "server_python", None))
                console.print(f"  Python kernel (Session.python, /run_jupyter): {kernel_shell}")
            except SandboxkitError as exc:
                console.print(f"  [red]{escape(str(exc))}[/]")
    if not strict:
        _language_table(docker)
        return
    from sandboxkit.cli._smoke import strict_check

    problems = strict_check(console, docker, only, options, libraries=libraries)
    for problem in problems:
        console.print(f"[red]problem[/]: {escape(problem)}", highlight=False)
    if problems:
        console.print(f"[bold red]doctor --strict: {len(problems)} problem(s)[/]")
        raise typer.Exit(1)
    console.print("[bold green]doctor --strict: every promised toolchain ran[/]")


def _languages_named(names: list[str]) -> list[str]:
    """Canonical names of ``--language`` values; an unknown one exits 2 naming the known ones."""
    from sandboxkit.languages import resolve_language

    try:
        return [resolve_language(name).name for name in names]
    except SandboxkitError as exc:
        fail(exc)


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
        table.add_row(name, lang.sandbox_fusion, *cells, escape(how_to_get(lang)) if name in missing_any else "")
    console.print(table)
    for name in sorted(missing_any):
        if LANGUAGES[name].unavailable:
            console.print(
                f"  {name}: not installed by scripts/bootstrap.sh: {LANGUAGES[name].unavailable}", markup=False
            )
    for title, found in columns.items():
        if isinstance(found, str):
            console.print(f"[yellow]{title} not checked[/]: {escape(found)}")


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
    console.print(f"removed {removed} sandbox(es) left by {backend}", markup=False)
