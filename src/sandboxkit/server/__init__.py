"""A Sandbox Fusion-compatible HTTP server over any sandboxkit backend (extra ``[server]``).

The wire format lives in :mod:`sandboxkit.protocols.sandbox_fusion`, shared with the
``sandbox_fusion`` client backend, so importing this package needs FastAPI and nothing
below it imports it.
"""

from __future__ import annotations

from sandboxkit.server.app import create_app

__all__ = ["create_app"]
