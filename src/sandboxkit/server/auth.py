"""An optional bearer token in front of every endpoint but ``/v1/ping``.

Why it exists: a server bound beyond loopback would otherwise run code for anyone who can reach
it, and kept ``/run_jupyter`` sessions would be as private as their ids only. With ``--token``
(or ``SANDBOXKIT_SERVE_TOKEN``) a request must carry ``Authorization: Bearer <token>``; without
a token nothing changes, so the ``sandbox-fusion`` client and verl keep working unconfigured.
``/v1/ping`` stays open because load balancers and readiness probes call it without headers.

It is a pure-ASGI layer placed outside admission control: a request without the token is
answered **401** before its body counts against the server's queue budget. The comparison takes
constant time, and neither the token nor what the client sent is echoed or logged.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from sandboxkit.server.admission import answer_early

__all__ = ["OPEN_PATHS", "BearerTokenMiddleware", "check_token"]

#: Paths answered without a token (health checks).
OPEN_PATHS = frozenset({"/v1/ping"})

_CHALLENGE = (b"www-authenticate", b'Bearer realm="sandboxkit"')


def check_token(token: str) -> str:
    """Return ``token`` if it can be sent in a header.

    Raises:
        ValueError: it is empty, or has whitespace or non-ASCII characters (it could never match).
    """
    if not token or not token.isascii() or any(c.isspace() or not c.isprintable() for c in token):
        raise ValueError(
            "the server token must be a non-empty string of printable ASCII without spaces; "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


class BearerTokenMiddleware:
    """Answer 401 to any request outside :data:`OPEN_PATHS` without ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = b"bearer " + check_token(token).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # none today; a route added later is guarded all the same
            await send({"type": "websocket.close", "code": 1008})
            return
        await answer_early(
            401,
            "this server requires a token: send the header 'Authorization: Bearer <token>' "
            "(the token the server was started with, --token or SANDBOXKIT_SERVE_TOKEN)",
            receive,
            send,
            [_CHALLENGE],
        )

    def _authorized(self, scope: Scope) -> bool:
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        sent = next((value for name, value in headers if name == b"authorization"), b"")
        scheme, _, credential = sent.partition(b" ")
        # The scheme is case-insensitive (RFC 7235); the token is compared in constant time.
        return hmac.compare_digest(scheme.lower() + b" " + credential.strip(), self._expected)
