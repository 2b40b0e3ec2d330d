"""``sandboxkit serve``: a Sandbox Fusion-compatible ``/run_code`` server over any backend.

Point verl's ``reward.sandbox_fusion.url`` at ``http://HOST:PORT/run_code`` or the
``sandbox-fusion`` client at ``http://HOST:PORT``; see docs/sandbox_fusion.md.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sandboxkit.cli._common import EXIT_USAGE, BackendOptionArg, backend_options, err_console, fail
from sandboxkit.errors import SandboxkitError

if TYPE_CHECKING:
    from sandboxkit.server.supervisor import WorkersConfig

#: Environment variable read for ``--token``.
TOKEN_ENV = "SANDBOXKIT_SERVE_TOKEN"


def _seconds(flag: str, help: str) -> Any:
    """A duration's option: ``--<flag>-s``, with ``--<flag>`` (its name before durations said ``-s``) kept for a release."""
    return typer.Option(f"--{flag}-s", f"--{flag}", help=help)


def register(app: typer.Typer) -> None:
    """Add the command to ``app``."""
    app.command("serve")(serve)


def serve(
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend that runs the code.")] = "subprocess",
    host: Annotated[str, typer.Option(help="Interface to bind (0.0.0.0 exposes it to the network).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one and prints it).")] = 8080,
    max_concurrency: Annotated[
        int, typer.Option("--max-concurrency", "-j", help="Runs in flight at once, across all workers.")
    ] = 64,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            show_default=False,
            help="Server processes behind the port, sharing one -j and one queue "
            "(default: half the usable cores, at least 1; 1: a single process).",
        ),
    ] = None,
    queue_timeout_s: Annotated[
        float | None,
        _seconds(
            "queue-timeout",
            "Seconds a request may wait for a run slot (default: as long as its client waits; "
            "the heartbeat keeps it waiting). Past it: 504.",
        ),
    ] = None,
    max_queue: Annotated[
        int, typer.Option(help="Requests that may wait for a run slot at once; more get 504 (retried by clients).")
    ] = 4096,
    max_queue_mb: Annotated[
        float, typer.Option(help="Body MiB that requests inside the server may hold at once; more get 504.")
    ] = 256.0,
    heartbeat_s: Annotated[
        float,
        _seconds(
            "heartbeat",
            "Seconds without an answer after which the 200 response starts and a space is sent this often "
            "until the JSON, so no client read timeout fires while a request waits (0: off).",
        ),
    ] = 5.0,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body in MiB; larger ones get 413.")] = 32.0,
    body_timeout_s: Annotated[
        float,
        _seconds("body-timeout", "Seconds a client has to send its body; slower: 408."),
    ] = 60.0,
    head_timeout_s: Annotated[
        float,
        _seconds("head-timeout", "Seconds a connection has to send a request's head (slow ones are closed)."),
    ] = 30.0,
    max_run_timeout_s: Annotated[
        float,
        _seconds("max-run-timeout", "Ceiling on a request's run_timeout (lowered to it)."),
    ] = 300.0,
    max_compile_timeout_s: Annotated[
        float,
        _seconds("max-compile-timeout", "Ceiling on a request's compile_timeout (lowered to it)."),
    ] = 300.0,
    max_memory_mb: Annotated[int, typer.Option(help="Ceiling on a request's memory_limit_MB (lowered to it).")] = 8192,
    memory_mb: Annotated[
        int, typer.Option(help="Memory limit of a run when the request says memory_limit_MB=-1.")
    ] = 1024,
    output_kb: Annotated[int, typer.Option(help="Per-stream output cap of a run in KiB (flagged when hit).")] = 1024,
    kernel_ttl_s: Annotated[
        float,
        _seconds("kernel-ttl", "Idle seconds after which a kept /run_jupyter session is closed."),
    ] = 600.0,
    max_sessions: Annotated[
        int,
        typer.Option(
            "--max-sessions",
            help="Kept /run_jupyter sessions at once, in sandboxes of their own (on top of -j); "
            "one more: 429 with Retry-After.",
        ),
    ] = 64,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            show_default=False,
            help="Require 'Authorization: Bearer TOKEN' on every endpoint but /v1/ping "
            f"(default: no token; prefer ${TOKEN_ENV} to keep it out of the process list).",
        ),
    ] = None,
    backend_option: BackendOptionArg = None,
    loop: Annotated[str, typer.Option(help="Event loop: auto (uvloop when installed), asyncio or uvloop.")] = "auto",
    http: Annotated[str, typer.Option(help="HTTP parser: auto (httptools when installed), h11 or httptools.")] = "auto",
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    access_log: Annotated[bool, typer.Option(help="Log every request (costs throughput).")] = False,
) -> None:
    """Serve POST /run_code, POST /run_jupyter and GET /v1/ping (Sandbox Fusion's API) over BACKEND."""
    try:
        import uvicorn

        from sandboxkit.server.app import create_app
    except ImportError as exc:
        err_console.print(
            f'error: the server needs FastAPI and uvicorn ({exc}); run: pip install "sandboxkit[server]"', markup=False
        )
        raise typer.Exit(EXIT_USAGE) from exc
    from sandboxkit.models import Limits
    from sandboxkit.server.ceilings import Ceilings
    from sandboxkit.server.connections import guarded_http_protocol

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if token is None and host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger(__name__).warning(
            "serving on %s without a token: anyone who reaches this port can run code here; set --token or $%s",
            host,
            TOKEN_ENV,
        )
    from sandboxkit.server.supervisor import WorkersConfig, default_workers

    count = default_workers() if workers is None else workers
    if count < 1:
        err_console.print(f"error: --workers must be >= 1, got {count}", markup=False)
        raise typer.Exit(EXIT_USAGE)
    app_kwargs: dict[str, Any] = {
        "max_concurrency": max_concurrency,
        "queue_timeout_s": queue_timeout_s,
        "max_body_bytes": int(max_body_mb * 1024 * 1024),
        "max_queue": max_queue,
        "max_queue_bytes": int(max_queue_mb * 1024 * 1024),
        "body_timeout_s": body_timeout_s,
        "heartbeat_s": heartbeat_s,
        "kernel_ttl_s": kernel_ttl_s,
        "max_sessions": max_sessions,
        "token": token,
    }
    try:
        limits = Limits(memory_mb=memory_mb, output_bytes=output_kb * 1024)
        ceilings = Ceilings(
            run_timeout_s=max_run_timeout_s, compile_timeout_s=max_compile_timeout_s, memory_mb=max_memory_mb
        )
        options = backend_options(backend, backend_option)
        # Built in this process in either mode: a bad bound or backend is a usage error before anything starts.
        app = create_app(backend, limits=limits, ceilings=ceilings, backend_options=options, **app_kwargs)
        protocol = guarded_http_protocol(http, head_timeout_s)
    except SandboxkitError as exc:
        fail(exc)
    except ValueError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_USAGE) from exc
    if count > 1:
        _serve_workers(
            WorkersConfig(
                workers=count,
                host=host,
                port=port,
                backend=backend,
                app={
                    **app_kwargs,
                    "limits": limits.model_dump(mode="json"),
                    "ceilings": asdict(ceilings),
                    "backend_options": options,
                },
                max_concurrency=max_concurrency,
                max_requests=max_concurrency + max_queue,
                max_bytes=app_kwargs["max_queue_bytes"],
                loop=loop,
                http=http,
                head_timeout_s=head_timeout_s,
                log_level=log_level,
                access_log=access_log,
            )
        )
        return
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        access_log=access_log,
        loop=loop,  # type: ignore[arg-type]
        http=protocol,
        timeout_keep_alive=30,
        backlog=4096,
        log_config=None,  # keep the logging set up above
    )
    server = _server_class()(config)
    server.run()


def _serve_workers(config: WorkersConfig) -> None:
    """Run ``config.workers`` worker processes under one supervisor (:mod:`sandboxkit.server.supervisor`)."""
    from sandboxkit.server.supervisor import serve_workers

    try:
        status = serve_workers(config, _announce)
    except OSError as exc:
        err_console.print(f"error: cannot listen on {config.host}:{config.port}: {exc}", markup=False)
        raise typer.Exit(1) from exc
    if status:
        raise typer.Exit(status)


def _announce(urls: list[str]) -> None:
    for url in urls:
        typer.echo(
            f"sandboxkit serve: listening on {url}  (verl: reward.sandbox_fusion.url={url}/run_code; "
            f"sandbox-fusion client: SANDBOX_FUSION_ENDPOINT={url})",
            err=True,
        )


def _server_class() -> type[Any]:
    import uvicorn

    class AnnouncingServer(uvicorn.Server):  # type: ignore[misc]
        """Prints the address actually bound (``--port 0`` picks one), once startup has finished."""

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            urls = []
            for srv in getattr(self, "servers", []):
                for sock in srv.sockets:
                    host, port = sock.getsockname()[:2]
                    urls.append(f"http://{'[' + host + ']' if ':' in host else host}:{port}")
            _announce(urls)

    return AnnouncingServer


def _parse_options(items: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--backend-option {item!r} must look like KEY=VALUE")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options
