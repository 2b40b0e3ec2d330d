"""One router per endpoint family; :func:`sandboxkit.server.app.create_app` mounts them.

* :mod:`.run_code`: ``POST /run_code``;
* :mod:`.jupyter`: ``POST /run_jupyter`` and its kept sessions;
* :mod:`.health`: ``/``, ``GET /v1/ping``, ``GET /v1/stats``, ``GET /metrics``.

A new endpoint family is a new module here with a ``router(ctx) -> APIRouter`` function.
"""
