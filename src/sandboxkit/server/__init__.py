"""A Sandbox Fusion-compatible HTTP server over any sandboxkit backend (extra ``[server]``).

``create_app`` is imported lazily so that :mod:`sandboxkit.server.models` (used by the
``sandbox_fusion`` client backend) works without FastAPI installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandboxkit.server.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        try:
            from sandboxkit.server.app import create_app
        except ImportError as exc:  # pragma: no cover - depends on the environment
            from sandboxkit.errors import BackendUnavailable

            raise BackendUnavailable(
                f'the server needs FastAPI and uvicorn ({exc}); run: pip install "sandboxkit[server]"'
            ) from exc
        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
