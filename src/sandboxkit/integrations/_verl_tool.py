"""verl's agent-loop tools: :class:`SandboxTool` (a ``BaseTool`` for the tool YAML) and :func:`code_interpreter`.

Both are re-exported from :mod:`sandboxkit.integrations.verl`, the path users and the YAML
``class_name`` name. The tool keys a trajectory's sandbox on ``agent_data.request_id`` because
verl's agent loop calls ``create -> execute -> release`` on every call; the stateless function
form shares the reward's pool settings (:data:`~._verl_reward.DEFAULTS`, ``SANDBOXKIT_*``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from sandboxkit.integrations._cells import cell_metrics, run_cell
from sandboxkit.integrations._codetool import CODE_INTERPRETER_SCHEMA, CodeRequest, CodeToolBase
from sandboxkit.integrations._format import format_error, format_result
from sandboxkit.integrations._prepared import fork_prepared
from sandboxkit.integrations._runtime import GRACE_S, PoolHandle, env_settings, limits_with
from sandboxkit.integrations._verl_reward import DEFAULTS, handle_for
from sandboxkit.kernel import CellResult
from sandboxkit.languages import resolve_language
from sandboxkit.models import Limits, RunResult
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["BaseTool", "SandboxTool", "ToolResponse", "code_interpreter"]

log = logging.getLogger("sandboxkit.integrations.verl")

try:  # verl's own classes when verl is installed; same-shaped stand-ins otherwise (e.g. reward-only use)
    from verl.tools.base_tool import BaseTool  # type: ignore[import-not-found]
    from verl.tools.schemas import OpenAIFunctionToolSchema as _SchemaModel  # type: ignore[import-not-found]
    from verl.tools.schemas import ToolResponse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised only without verl

    class ToolResponse:  # type: ignore[no-redef]
        """Stand-in for ``verl.tools.schemas.ToolResponse``."""

        def __init__(self, text: str | None = None, **_: Any) -> None:
            self.text = text

    class BaseTool:  # type: ignore[no-redef]
        """Stand-in for ``verl.tools.base_tool.BaseTool``."""

        def __init__(self, config: dict[str, Any], tool_schema: Any) -> None:
            self.config = config
            self.tool_schema = tool_schema
            self.name = "code_interpreter"

    _SchemaModel = None  # type: ignore[misc,assignment]


class _Slot:
    """A trajectory's sandbox session and when it was last used."""

    __slots__ = ("busy", "last_used", "session")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.last_used = time.monotonic()
        self.busy = 0


class SandboxTool(BaseTool, CodeToolBase):  # type: ignore[misc]
    """A ``code_interpreter`` tool for verl's agent loop, backed by a sandbox pool.

    Config keys (all optional; the old ``SandboxFusionTool`` keys keep their meaning):

    * ``backend`` (default ``subprocess``; a name, or a ``{kind: docker, image: ...}`` mapping; in code also
      a ``DockerConfig(...)``, a Backend or a SyncSandboxPool), ``backend_options`` (checked against the
      backend's config when the tool is built: a typo raises ``InvalidRequest`` naming the valid keys);
      ``sandbox_fusion_url`` selects the ``sandbox_fusion`` backend at that URL when ``backend`` is not given.
    * ``num_workers`` and ``rate_limit``: the cap on programs running at once is their minimum
      (per worker process; verl runs one tool instance per ``AgentLoopWorker``).
    * ``default_timeout`` (seconds per run, 30), ``default_language`` (python), ``memory_limit_mb`` (1024).
    * ``allow_model_timeout`` / ``allow_model_language`` (False): honour ``timeout`` / ``language``
      arguments from the model; a model timeout is clamped into [1 s, ``max_timeout`` (60)] and the
      answer says so (the same rule as SGLang's ``CodeInterpreter``).
    * ``stateful`` (True): one sandbox per trajectory, keyed on ``agent_data.request_id``;
      ``session_ttl_s`` (600) releases it after that long unused; ``max_sessions`` (256) bounds
      sandboxes held at once (the least recently used idle one is released past it).
    * ``stateful_python`` (False): Python calls run as cells of the trajectory's persistent
      interpreter, so what one call defines the next can use (``docs/kernels.md``); the answer
      shows the last expression's value, and says when a timeout or crash lost the state.
    * ``max_output_chars`` (8000), ``deadline_s`` (120): bound on one call, queue wait included.
    * ``fork_from_checkpoint`` (False): a trajectory's sandbox starts as a fork of its task's
      prepared checkpoint: the ``files`` ({path: text}) and ``setup_command`` of its
      ``create_kwargs`` (from the dataset's ``tools_kwargs``; ``setup_command`` also as a config
      key) are written and run once per task, and the N rollouts of a prompt fork from that.
    * ``enable_global_rate_limit``, ``type``: accepted for compatibility.
    """

    def __init__(self, config: dict[str, Any] | None, tool_schema: Any = None) -> None:
        if tool_schema is None and _SchemaModel is not None:
            tool_schema = _SchemaModel.model_validate(CODE_INTERPRETER_SCHEMA)
        super().__init__(dict(config or {}), tool_schema)
        cfg = self.config
        backend = cfg.get("backend")
        options = dict(cfg.get("backend_options") or {})
        if backend is None and cfg.get("sandbox_fusion_url"):
            backend, options = "sandbox_fusion", {**options, "url": cfg["sandbox_fusion_url"]}
        caps = [int(cfg[k]) for k in ("num_workers", "rate_limit") if cfg.get(k)]
        self.max_concurrency = min(caps) if caps else 16
        self.timeout_s = float(cfg.get("default_timeout", 30))
        self.language = resolve_language(str(cfg.get("default_language", "python"))).name
        self.allow_timeout = bool(cfg.get("allow_model_timeout", False))
        self.allow_language = bool(cfg.get("allow_model_language", False))
        self.max_timeout_s = float(cfg.get("max_timeout", 60))
        self.stateful = bool(cfg.get("stateful", True))
        self.stateful_python = bool(cfg.get("stateful_python", False))
        self.session_ttl_s = float(cfg.get("session_ttl_s", 600))
        self.max_sessions = int(cfg.get("max_sessions", 256))
        self.max_output_chars = int(cfg.get("max_output_chars", 8000))
        self.deadline_s = float(cfg.get("deadline_s", 120))
        self.fork_from_checkpoint = bool(cfg.get("fork_from_checkpoint", False))
        self.setup_command: str | None = cfg.get("setup_command")
        self.limits: Limits = limits_with(
            None, timeout_s=self.timeout_s, memory_limit_mb=cfg.get("memory_limit_mb", 1024)
        )
        self.tool_name = str(getattr(self, "name", "code_interpreter"))
        pool_options: dict[str, Any] = {
            "max_concurrency": self.max_concurrency,
            "max_sandboxes": max(self.max_sessions, self.max_concurrency) + self.max_concurrency,
            "limits": self.limits,
        }
        if options:
            pool_options["backend_options"] = options
        # ``backend`` may also be a Backend instance or a SyncSandboxPool when the tool is built in code.
        self.handle = PoolHandle(backend or "subprocess", **pool_options)
        self._slots: dict[str, _Slot] = {}
        self._instances: dict[str, str] = {}  # instance id -> session key
        self._prepared: dict[str, tuple[dict[str, bytes], str | None]] = {}  # instance id -> its task's state
        self._lock = threading.Lock()

    # ----------------------------------------------------------- lifecycle called by verl

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, Any]:
        """Register a call; the sandbox itself is opened lazily by ``execute`` (verl calls this per call)."""
        instance_id = instance_id or str(uuid.uuid4())
        create_kwargs = kwargs.get("create_kwargs")
        key = None
        if isinstance(create_kwargs, Mapping):
            key = create_kwargs.get("session_id")
        with self._lock:
            self._instances[instance_id] = str(key) if key else instance_id
            if self.fork_from_checkpoint:
                spec = create_kwargs if isinstance(create_kwargs, Mapping) else {}
                files = {
                    str(p): b.encode("utf-8") if isinstance(b, str) else bytes(b)
                    for p, b in dict(spec.get("files") or {}).items()
                }
                self._prepared[instance_id] = (files, spec.get("setup_command", self.setup_command))
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[Any, float, dict[str, Any]]:
        """Run the model's code in the trajectory's sandbox. Never raises: errors come back as text."""
        started = time.monotonic()
        checked = self.check_arguments(parameters)
        if isinstance(checked, str):
            return ToolResponse(text=checked), 0.0, {"status": "invalid_call", "exit_code": None, "duration_s": 0.0}
        key = self._key(instance_id, kwargs.get("agent_data"))
        await self._sweep()
        text, result = await self.run_request(checked, lambda pool, req: self._run(pool, key, req, instance_id))
        if result is None:
            metrics = {"status": "infra_error", "exit_code": None, "duration_s": round(time.monotonic() - started, 6)}
        elif isinstance(result, CellResult):
            metrics = cell_metrics(result)
        else:
            metrics = {"status": result.status.value, "exit_code": result.exit_code, "duration_s": result.duration_s}
        return ToolResponse(text=text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """No tool-level reward (verl 0.9 never calls this)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the call. A trajectory's sandbox stays until its TTL; one keyed on the call is closed now."""
        with self._lock:
            self._prepared.pop(instance_id, None)
            key = self._instances.pop(instance_id, None)
            slot = self._slots.pop(key, None) if key == instance_id else None
        if slot is not None:
            await self._close_slots([slot])

    def close(self) -> None:
        """Release every sandbox and the pool (end of a run, tests). Idempotent."""
        with self._lock:
            slots = list(self._slots.values())
            self._slots.clear()
            self._instances.clear()
        if slots and self.handle.created:
            try:
                self.handle.call(lambda _p: _close_sessions([s.session for s in slots]), self.deadline_s)
            except Exception:
                log.warning("closing SandboxTool sessions failed", exc_info=True)
        self.handle.close()

    @property
    def open_sessions(self) -> int:
        """Trajectory sandboxes currently held."""
        return len(self._slots)

    # ----------------------------------------------------------- helpers

    def _key(self, instance_id: str, agent_data: Any) -> str:
        request_id = getattr(agent_data, "request_id", None)
        with self._lock:
            if not self.stateful:
                key = instance_id  # a fresh sandbox per call, closed by release()
            else:
                key = str(request_id) if request_id else self._instances.get(instance_id, instance_id)
            self._instances[instance_id] = key
            return key

    async def _run(
        self, pool: SandboxPool, key: str, request: CodeRequest, instance_id: str = ""
    ) -> RunResult | CellResult:
        """On the pool's loop: run in the trajectory's session (opened on first use, or forked)."""
        with self._lock:
            slot = self._slots.get(key)
            prepared = self._prepared.get(instance_id) if slot is None else None
        if slot is None and prepared is not None:
            files, setup = prepared
            forked = await fork_prepared(pool, files, setup, self.limits, timeout_s=self.timeout_s)
            with self._lock:
                kept = key not in self._slots
                if kept:
                    self._slots[key] = _Slot(forked)
            if not kept:  # another call of the trajectory forked first: keep one
                await forked.close()
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = _Slot(pool.session(limits=self.limits))
                self._slots[key] = slot
            slot.busy += 1
        try:
            if self.stateful_python and request.language == "python":
                return await run_cell(slot.session, request.code, request.timeout_s)
            return await slot.session.run(request.code, language=request.language, timeout_s=request.timeout_s)
        finally:
            with self._lock:
                slot.busy -= 1
                slot.last_used = time.monotonic()

    async def _sweep(self) -> None:
        """Release sandboxes idle past the TTL, and the least recently used ones past ``max_sessions``."""
        now = time.monotonic()
        with self._lock:
            expired = [k for k, s in self._slots.items() if not s.busy and now - s.last_used > self.session_ttl_s]
            idle = sorted((s.last_used, k) for k, s in self._slots.items() if not s.busy and k not in expired)
            over = len(self._slots) - len(expired) - self.max_sessions + 1
            expired += [k for _, k in idle[: max(over, 0)]]
            slots = [self._slots.pop(k) for k in expired]
        if slots:
            await self._close_slots(slots)

    async def _close_slots(self, slots: list[_Slot]) -> None:
        if not self.handle.created:
            return
        try:
            await self.handle.acall(lambda _p: _close_sessions([s.session for s in slots]), self.deadline_s)
        except Exception:
            log.warning("releasing %d SandboxTool sessions failed", len(slots), exc_info=True)


async def _close_sessions(sessions: list[Session]) -> None:
    await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


async def code_interpreter(code: str) -> str:
    """Run a Python program in a sandbox and return what it printed and how it ended.

    Args:
        code: The complete program to run.
    """
    settings = {**DEFAULTS, **env_settings()}
    try:
        language = resolve_language(settings["language"]).name
        limits = limits_with(None, timeout_s=settings.get("timeout"), memory_limit_mb=settings.get("memory_limit_mb"))
        handle = handle_for(settings)
        deadline = float(settings["deadline_s"])
        result = await handle.acall(lambda pool: pool.run(code, language=language, limits=limits), deadline + GRACE_S)
    except Exception as exc:
        return format_error(exc)
    return format_result(result)
