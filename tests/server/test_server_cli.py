"""``sandboxkit serve`` and ``create_app`` refuse bad configuration before serving anything."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sandboxkit.cli import app
from sandboxkit.errors import BackendNotFound, InvalidRequest
from sandboxkit.server.app import create_app


@pytest.mark.parametrize(
    "kwargs",
    [{"max_concurrency": 0}, {"queue_timeout_s": 0}, {"max_body_bytes": 0}, {"max_queue": -1}],
)
def test_create_app_rejects_bad_bounds(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidRequest):
        create_app("subprocess", **kwargs)  # type: ignore[arg-type]


def test_create_app_unknown_backend() -> None:
    with pytest.raises(BackendNotFound, match="nope"):
        create_app("nope")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--backend", "nope"], "nope"),
        (["--max-concurrency", "0"], "max_concurrency"),
        (["--backend-option", "novalue"], "KEY=VALUE"),
        (["--max-memory-mb", "0"], "memory_mb"),
        (["--memory-mb", "4096", "--max-memory-mb", "1024"], "above the ceiling"),
        (["--max-queue", "-1"], "max_queue"),
        (["--head-timeout-s", "0"], "head_timeout"),
        (["--head-timeout", "0"], "head_timeout"),  # the old name, kept for a release
        (["--workers", "0"], "--workers"),
    ],
)
def test_serve_usage_errors_exit_2(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "0", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_serve_with_workers_on_a_taken_port_exits_1_naming_the_address() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--workers", "2", "--host", "127.0.0.1", "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
