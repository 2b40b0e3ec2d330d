"""``sandbox_fusion``: a client backend for any Sandbox Fusion-compatible ``/run_code`` service.

That is ByteDance's Sandbox Fusion server, a hosted FaaS deployment of it, or another
sandboxkit process started with ``sandboxkit serve``. The service is stateless: every call
is one ``POST /run_code`` in a fresh temporary directory. So this backend's "sandbox" is a
handle, not a workspace:

* ``capabilities.stateful`` is False. Files written by one run are not seen by the next.
  ``write_files`` stages files on the client; they are uploaded with every later call on
  the same handle, and ``read_files`` fetches them back through a no-op run. Files a
  program creates are lost unless named in ``fetch_files``.
* ``resettable`` is True: ``reset()`` drops the staged files; there is nothing remote.
* ``exec()`` runs the command as a ``bash`` program through ``/run_code``.

Retries (why it looks like this): the pool already retries :class:`~sandboxkit.errors.Transient`
errors with exponential backoff, full jitter and a deadline. Retrying here as well would
multiply the attempts (pool retries x backend retries) and hide them from the pool's
metrics. So by default one call is one HTTP attempt, with one exception: a request that
fails on a *reused* keep-alive connection before any response arrived is sent again at
once, because that is a property of connection reuse (the server closed an idle
connection), not a fault of the service. ``retries=N`` adds N in-backend attempts with a
short backoff for callers that use the backend without a pool.

Error mapping: connection errors, read stalls, HTTP 5xx (504 included) and ``SandboxError``
responses → :class:`Transient`; HTTP 429 → :class:`RateLimited` (with ``Retry-After``); HTTP
422 and 413 → :class:`InvalidRequest` (never retried); 401/403/404 → :class:`BackendUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shlex
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import httpx
from pydantic import ValidationError

from sandboxkit.base import Availability, Backend, Capabilities, Sandbox
from sandboxkit.configs import SandboxFusionConfig
from sandboxkit.errors import BackendUnavailable, InvalidRequest, RateLimited, SandboxCrashed, Transient
from sandboxkit.languages import LANGUAGES
from sandboxkit.models import ExecRequest, ExecResult, Limits, RunRequest, RunResult, check_relative_path
from sandboxkit.protocols.sandbox_fusion import (
    SANDBOX_FUSION_LANGUAGES,
    RunCodeResponse,
    request_to_sandbox_fusion,
    result_from_sandbox_fusion,
)
from sandboxkit.streaming import BufferedSandbox

__all__ = ["SandboxFusionBackend", "SandboxFusionSandbox", "split_url"]

log = logging.getLogger(__name__)

URL_ENV = "SANDBOX_FUSION_URL"
_NAME = "sandbox_fusion"
_SHELL_NAME = "main.sh"


def split_url(url: str) -> tuple[str, str]:
    """Return ``(base_url, run_code_url)`` for a base URL or a full ``.../run_code`` URL.

    Raises:
        InvalidRequest: the URL is not http(s).
    """
    cleaned = url.strip().rstrip("/")
    if not cleaned.startswith(("http://", "https://")):
        raise InvalidRequest(
            f"Sandbox Fusion url {url!r} must start with http:// or https://, e.g. http://127.0.0.1:8080",
            backend=_NAME,
        )
    if cleaned.endswith("/run_code"):
        return cleaned[: -len("/run_code")], cleaned
    return cleaned, cleaned + "/run_code"


def _default_languages() -> frozenset[str]:
    # The languages whose Sandbox Fusion name the upstream service knows (not 'c'), less 'sql': upstream lists
    # it but has no runner, so every such request would come back as a SandboxError.
    return frozenset(
        name
        for name, lang in LANGUAGES.items()
        if lang.sandbox_fusion in SANDBOX_FUSION_LANGUAGES and lang.sandbox_fusion != "sql"
    )


class SandboxFusionBackend(Backend):
    """Talks to a Sandbox Fusion-compatible service over HTTP, reusing connections.

    Args:
        config: the options, a :class:`~sandboxkit.configs.SandboxFusionConfig`; or the service
            URL alone (``SandboxFusionBackend("http://host:8080")``, as before configs existed).
        **options: the same options as keywords (``url=``, ``retries=``...), validated by that
            model, over ``config`` when both are given.

    Raises:
        InvalidRequest: an option is unknown or invalid, or no URL is given and
            ``$SANDBOX_FUSION_URL`` is unset, or it is not http(s).
    """

    name = _NAME
    config_model: ClassVar[type[SandboxFusionConfig]] = SandboxFusionConfig

    def __init__(self, config: SandboxFusionConfig | str | None = None, **options: Any) -> None:
        if isinstance(config, str):
            config, options = None, {"url": config, **options}
        self.config = config = SandboxFusionConfig.from_options(config, options)
        url = config.url or os.environ.get(URL_ENV)
        if not url:
            raise InvalidRequest(f"no Sandbox Fusion URL: pass url='http://host:8080' or set ${URL_ENV}", backend=_NAME)
        self.base_url, self.run_code_url = split_url(url)
        self.retries = config.retries
        self.backoff_base_s = config.backoff_base_s
        self.request_grace_s = config.request_grace_s
        self.connect_timeout_s = config.connect_timeout_s
        self.max_connections = config.max_connections
        self.headers = dict(config.headers or {})
        if config.languages is None:
            self._languages = _default_languages()
        else:
            from sandboxkit.languages import resolve_language

            self._languages = frozenset(resolve_language(lang).name for lang in config.languages)
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._handles: set[str] = set()

    @property
    def live_sandboxes(self) -> int:
        """Handles opened and not yet closed (nothing remote exists; this counts client objects)."""
        return len(self._handles)

    @property
    def capabilities(self) -> Capabilities:
        """Stateless, resettable; the service enforces timeouts and (if it can) memory."""
        return Capabilities(
            languages=self._languages,
            stateful=False,
            network_control=False,
            limits=frozenset({"timeout_s", "compile_timeout_s", "memory_mb", "output_bytes"}),
            resettable=True,
            notes=(
                "each call is one POST /run_code in a fresh directory on the service; nothing persists between calls",
                "output_bytes is applied on the client after the service answered",
            ),
        )

    @classmethod
    def availability(cls, **options: object) -> Availability:
        """Usable when a URL is configured (no network access here)."""
        if options.get("url") or os.environ.get(URL_ENV):
            return Availability(True)
        return Availability(False, f"no URL: pass url= or set ${URL_ENV}")

    # ----------------------------------------------------------------- HTTP plumbing

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            # Connections belong to the loop that opened them; a new loop gets a new client.
            self._client = httpx.AsyncClient(
                headers={"Accept": "application/json", **self.headers},
                limits=httpx.Limits(
                    max_connections=self.max_connections, max_keepalive_connections=self.max_connections
                ),
                timeout=httpx.Timeout(60.0, connect=self.connect_timeout_s),
                trust_env=False,
            )
            self._client_loop = loop
        return self._client

    async def ping(self) -> bool:
        """``GET /v1/ping`` answered ``"pong"``. Never raises."""
        try:
            response = await self._http().get(f"{self.base_url}/v1/ping", timeout=self.connect_timeout_s)
            return response.status_code == 200 and response.json() == "pong"
        except (httpx.HTTPError, ValueError):
            return False

    async def post_run_code(
        self, body: dict[str, Any], *, read_timeout: float, sandbox_id: str | None
    ) -> RunCodeResponse:
        """POST one ``/run_code`` body, with the retry policy described in the module docstring.

        Returns:
            The parsed response, whose status may be ``SandboxError`` (the caller decides).

        Raises:
            Transient / RateLimited: after the in-backend attempts, for a passing fault.
            InvalidRequest: the service rejected the request (422/413).
            BackendUnavailable: wrong URL or credentials (401/403/404).
        """
        attempt = 0
        while True:
            try:
                return await self._post_once(body, read_timeout, sandbox_id)
            except Transient as exc:
                if attempt >= self.retries:
                    raise
                delay = random.uniform(0, self.backoff_base_s * 2**attempt)
                if isinstance(exc, RateLimited) and exc.retry_after:
                    delay = max(delay, min(exc.retry_after, 10.0))
                attempt += 1
                log.info("sandbox_fusion: retrying after %s (attempt %d/%d)", exc, attempt, self.retries)
                await asyncio.sleep(delay)

    async def _post_once(self, body: dict[str, Any], read_timeout: float, sandbox_id: str | None) -> RunCodeResponse:
        where = {"backend": _NAME, "sandbox_id": sandbox_id}
        timeout = httpx.Timeout(read_timeout, connect=self.connect_timeout_s)
        client = self._http()
        try:
            try:
                response = await client.post(self.run_code_url, json=body, timeout=timeout)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                # Most likely a keep-alive connection the server had already closed: send once more.
                response = await client.post(self.run_code_url, json=body, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise Transient(
                f"{self.run_code_url} did not answer in time ({type(exc).__name__}); the service is overloaded or "
                "stalled; it will be retried",
                **where,
            ) from exc
        except httpx.TransportError as exc:
            raise Transient(
                f"cannot reach {self.run_code_url} ({type(exc).__name__}: {exc}); is the service running?", **where
            ) from exc
        return self._parse(response, where)

    def _parse(self, response: httpx.Response, where: dict[str, Any]) -> RunCodeResponse:
        code = response.status_code
        text = response.text[:500]
        if code == 200:
            try:
                return RunCodeResponse.model_validate_json(response.content)
            except ValidationError as exc:
                raise Transient(f"malformed /run_code response from {self.run_code_url}: {text!r}", **where) from exc
        if code == 429:
            raise RateLimited(
                f"{self.run_code_url} answered 429 (rate limited): {text!r}",
                retry_after=_retry_after(response.headers.get("retry-after")),
                **where,
            )
        if code in (422, 413, 400):
            raise InvalidRequest(f"{self.run_code_url} rejected the request (HTTP {code}): {text!r}", **where)
        if code in (401, 403, 404, 405):
            raise BackendUnavailable(
                f"{self.run_code_url} answered HTTP {code}: {text!r}; check the URL and credentials", **where
            )
        raise Transient(f"{self.run_code_url} answered HTTP {code}: {text!r}", **where)

    # ----------------------------------------------------------------- contract

    async def open(self, limits: Limits | None = None) -> Sandbox:
        """A handle for stateless calls; opening costs no request."""
        sandbox = SandboxFusionSandbox(self, limits or Limits())
        self._handles.add(sandbox.id)
        return sandbox

    async def aclose(self) -> None:
        """Close the HTTP client (idempotent)."""
        client, self._client = self._client, None
        if client is not None and not client.is_closed:
            try:
                await client.aclose()
            except RuntimeError:  # its loop is gone; the sockets went with it
                pass


class SandboxFusionSandbox(BufferedSandbox):
    """A stateless handle on the service; see the module docstring for what persists."""

    backend_name = _NAME

    def __init__(self, backend: SandboxFusionBackend, limits: Limits) -> None:
        self.backend = backend
        self.limits = limits
        self.id = f"sf-{uuid.uuid4().hex[:12]}"
        self._staged: dict[str, bytes] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxCrashed("this sandbox handle is closed; open a new one", backend=_NAME, sandbox_id=self.id)

    async def _call(self, request: RunRequest) -> RunResult:
        self._check_open()
        if request.language not in self.backend.capabilities.languages:
            raise InvalidRequest(
                f"the Sandbox Fusion service is configured for {sorted(self.backend.capabilities.languages)}, "
                f"not {request.language!r}; pass languages=[...] to the backend if it supports more",
                backend=_NAME,
                sandbox_id=self.id,
            )
        if self._staged:
            request = request.model_copy(update={"files": {**self._staged, **request.files}})
        body = request_to_sandbox_fusion(request)
        read_timeout = request.limits.compile_timeout_s + request.limits.timeout_s + self.backend.request_grace_s
        response = await self.backend.post_run_code(body, read_timeout=read_timeout, sandbox_id=self.id)
        return result_from_sandbox_fusion(response, request, backend=_NAME, sandbox_id=self.id)

    async def _run_buffered(self, request: RunRequest) -> RunResult:
        """One ``POST /run_code`` (staged files uploaded with it).

        Raises:
            InvalidRequest: unsupported language, ``env``/``argv`` set, or HTTP 422/413.
            BackendUnavailable: wrong URL or credentials.
            Transient: connection error, stall, HTTP 5xx, or a ``SandboxError`` response.
            RateLimited: HTTP 429.
        """
        return await self._call(request)

    async def _exec_buffered(self, request: ExecRequest) -> ExecResult:
        """Run ``command`` as a bash program through ``/run_code`` (a fresh directory each time).

        Raises:
            InvalidRequest: ``cwd`` escapes the workspace, an env name is not an identifier,
                or the timeout is not positive.
            Transient, RateLimited, BackendUnavailable: as for :meth:`run`.
        """
        if "bash" not in self.backend.capabilities.languages:
            raise InvalidRequest("exec() needs the service to run bash", backend=_NAME, sandbox_id=self.id)
        command, cwd, timeout = request.command, request.cwd, request.timeout_s
        lines = []
        for key, value in request.env.items():
            if not key.isidentifier():
                raise InvalidRequest(f"env name {key!r} is not a valid shell identifier", backend=_NAME)
            lines.append(f"export {key}={shlex.quote(value)}")
        if cwd:
            try:
                lines.append(f"cd -- {shlex.quote(check_relative_path(cwd))} || exit 1")
            except ValueError as exc:
                raise InvalidRequest(f"cwd: {exc}", backend=_NAME, sandbox_id=self.id) from exc
        lines.append(command if isinstance(command, str) else shlex.join(command))
        limits = self.limits if timeout is None else self.limits.merged(timeout_s=timeout)
        program = RunRequest(code="\n".join(lines) + "\n", language="bash", stdin=request.stdin, limits=limits)
        result = await self._call(program)
        return ExecResult(**result.model_dump(include=set(ExecResult.model_fields)))  # the run without its extras

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Stage files; they are uploaded with every later call on this handle.

        Raises:
            InvalidRequest: a path is absolute or contains ``..``.
        """
        self._check_open()
        staged = {}
        for path, data in files.items():
            try:
                staged[check_relative_path(path)] = data.encode("utf-8") if isinstance(data, str) else bytes(data)
            except ValueError as exc:
                raise InvalidRequest(str(exc), backend=_NAME, sandbox_id=self.id) from exc
        self._staged.update(staged)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Fetch files through a no-op bash run (so only staged files can exist).

        Raises:
            InvalidRequest: a path is absolute or contains ``..``.
            Transient, RateLimited, BackendUnavailable: as for :meth:`run`.
        """
        self._check_open()
        try:
            wanted = [check_relative_path(p) for p in paths]
        except ValueError as exc:
            raise InvalidRequest(str(exc), backend=_NAME, sandbox_id=self.id) from exc
        if not wanted or not self._staged:
            return {}
        result = await self._call(RunRequest(code="true\n", language="bash", fetch_files=wanted, limits=self.limits))
        return dict(result.files)

    async def alive(self) -> bool:
        """True until closed: there is no remote sandbox to lose (service faults surface per call)."""
        return not self._closed

    async def reset(self) -> bool:
        """Drop the staged files; nothing remote to clean."""
        self._staged.clear()
        return not self._closed

    async def close(self) -> None:
        """Forget the handle (idempotent)."""
        self._closed = True
        self._staged.clear()
        self.backend._handles.discard(self.id)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to the pool's backoff
