"""verl adapters: ``compute_score`` for the reward loop, ``SandboxTool`` and ``code_interpreter`` for the agent loop.

**Reward.** verl (>= 0.7.1) loads a custom reward function with::

    reward.custom_reward_function.path=pkg://sandboxkit.integrations.verl
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.backend=docker      # optional; or SANDBOXKIT_BACKEND

and its reward-loop managers call it per sample with keywords only, awaiting it when it is
a coroutine function. The ground truth is verl's (a dict or JSON string with
``inputs``/``outputs``, optional ``fn_name``, or ``assert_case``) or any shape the judge reads.
verl has no timeout around reward functions and builds its extra-info columns from the
*first* sample's keys, so ``compute_score`` never raises, never waits past ``deadline_s``,
and returns the same keys on every path: an infrastructure failure scores 0.0 with
``infra_error=True`` and ``status="infra_error"`` so it can be filtered, not learned from.

**Tool.** verl >= 0.8 dropped its ``SandboxFusionTool``. :class:`SandboxTool` is a
``BaseTool`` for the tool YAML (``class_name: sandboxkit.integrations.verl.SandboxTool``)
that accepts the old tool's config keys. The agent loop calls ``create -> execute -> release``
on *every* call, so the sandbox of a trajectory is keyed on ``agent_data.request_id`` and
kept until a TTL passes; files persist from one call to the next. :func:`code_interpreter`
is the stateless function form for ``multi_turn.function_tool_path`` (see ``examples/verl/``).
"""

from __future__ import annotations

import asyncio
import json
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
from sandboxkit.integrations._runtime import GRACE_S, PoolHandle, env_settings, limits_with, shared_handle
from sandboxkit.kernel import CellResult
from sandboxkit.languages import resolve_language
from sandboxkit.models import Limits, RunResult
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["SCORE_KEYS", "SandboxTool", "code_interpreter", "compute_score", "compute_score_sync"]

log = logging.getLogger(__name__)

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


# ---------------------------------------------------------------------------------- reward

#: Keys of every dict ``compute_score`` returns, in order.
SCORE_KEYS = (
    "score",
    "status",
    "passed",
    "total",
    "pass_rate",
    "error",
    "extraction",
    "infra_error",
    "language",
    "duration_s",
)

_DEFAULTS: dict[str, Any] = {
    "backend": "subprocess",
    "language": "python",
    "shaping": "pass_rate",
    "max_concurrency": 32,
    "deadline_s": 300.0,
}
_REWARD_KEYS = (
    "backend",
    "limiter",
    "backend_options",
    "language",
    "shaping",
    "timeout",
    "memory_limit_mb",
    "max_concurrency",
    "deadline_s",
    "continuous",
    "banned_patterns",
    "compare",
    "sandbox_fusion_url",
    "isolate_asserts",
)


def _reward_settings(kwargs: Mapping[str, Any], extra_info: Any) -> dict[str, Any]:
    settings = {**_DEFAULTS, **env_settings()}
    if isinstance(extra_info, Mapping) and isinstance(extra_info.get("language"), str):
        settings["language"] = extra_info["language"]
    settings.update({k: kwargs[k] for k in _REWARD_KEYS if kwargs.get(k) is not None})
    if settings.get("sandbox_fusion_url") and "backend" not in kwargs:
        # Old configs name a Sandbox Fusion URL: keep using that service, through the pool.
        settings["backend"] = "sandbox_fusion"
        settings["backend_options"] = {
            **dict(settings.get("backend_options") or {}),
            "url": settings["sandbox_fusion_url"],
        }
    return settings


def _first_cases(ground_truth: Any, n: int) -> Any:
    """verl's ``continuous=True``: grade only the first ``n`` cases of a verl-shaped ground truth."""
    data = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if not isinstance(data, Mapping):
        return data[:n] if isinstance(data, list) else data
    out = dict(data)
    for key in ("inputs", "outputs", "assert_case"):
        if isinstance(out.get(key), list):
            out[key] = out[key][:n]
    return out


def _score_dict(verdict: Any) -> dict[str, Any]:
    data = verdict.to_dict()
    score = float(data["reward"]) if data.get("reward") is not None else 0.0
    out = {"score": score, **{k: data.get(k) for k in SCORE_KEYS if k != "score"}}
    out["error"] = out["error"] or ""
    return out


def _failure(status: str, message: str, language: str, *, infra: bool) -> dict[str, Any]:
    from sandboxkit.judge import Verdict

    verdict = Verdict(status=status, infra_error=infra, error=message[:300], language=language, reward=None)  # type: ignore[arg-type]
    return _score_dict(verdict)


def _handle_for(settings: Mapping[str, Any]) -> PoolHandle:
    options: dict[str, Any] = {
        "max_concurrency": int(settings["max_concurrency"]),
        "deadline_s": float(settings["deadline_s"]),
    }
    if settings.get("backend_options"):
        options["backend_options"] = dict(settings["backend_options"])
    if settings.get("limiter"):  # "ray": one cap for every reward worker of the cluster
        options["limiter"] = settings["limiter"]
    return shared_handle(settings["backend"], **options)


async def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Grade one response in a sandbox; verl's reward-loop signature.

    Args:
        data_source: the row's data source (not used to route: every source is graded the same way).
        solution_str: the decoded response; code is extracted from it by the judge.
        ground_truth: the tests (verl / APPS / CodeContests shapes, or the judge's own).
        extra_info: the row's extra info; a ``language`` key there sets the language.
        **kwargs: ``reward_kwargs`` from the config: ``backend``, ``backend_options``, ``language``,
            ``shaping``, ``timeout`` (seconds per test), ``memory_limit_mb``, ``max_concurrency``,
            ``deadline_s``, ``continuous`` (first 10 cases only, as verl's built-in scorer),
            ``banned_patterns``, ``compare``, ``sandbox_fusion_url``, ``isolate_asserts`` (Python assert
            tests run outside the solution's process, default true, see :mod:`sandboxkit.judge.isolated`). Unset ones come from
            ``SANDBOXKIT_*`` environment variables, then defaults. Other keys are ignored.

    Returns:
        A dict with exactly :data:`SCORE_KEYS`; ``score`` is the reward, 0.0 when nothing could be
        judged (``status`` ``infra_error`` or ``invalid``).
    """
    language = "python"
    try:
        settings = _reward_settings(kwargs, extra_info)
        language = resolve_language(settings["language"]).name
        limits = limits_with(None, timeout=settings.get("timeout"), memory_limit_mb=settings.get("memory_limit_mb"))
        tests = _first_cases(ground_truth, 10) if settings.get("continuous") else ground_truth
        handle = _handle_for(settings)
        deadline = float(settings["deadline_s"])
    except Exception as exc:
        log.error("compute_score: bad settings: %s", exc)
        return _failure("invalid", f"bad reward settings: {exc}", language, infra=False)

    from sandboxkit.judge import grade

    try:
        verdict = await handle.acall(
            lambda pool: asyncio.wait_for(
                grade(
                    pool,
                    solution_str or "",
                    tests,
                    language=language,
                    shaping=settings["shaping"],
                    banned_patterns=tuple(settings.get("banned_patterns") or ()),
                    limits=limits,
                    compare=settings.get("compare"),
                    isolate_asserts=settings.get("isolate_asserts", True),
                ),
                deadline,
            ),
            deadline + GRACE_S,
        )
    except Exception as exc:
        log.warning("compute_score: the sandbox could not grade this sample: %s", exc)
        return _failure("infra_error", str(exc) or type(exc).__name__, language, infra=True)
    return _score_dict(verdict)


def compute_score_sync(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Any = None,
    **kwargs: Any,
) -> float:
    """A blocking variant returning only the score, for verl's legacy ``prime`` / ``batch``-style managers.

    Module-level and picklable (``prime`` ships it to a process pool); takes the same arguments.
    """
    result = asyncio.run(compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs))
    return float(result["score"])


# ---------------------------------------------------------------------------------- tool


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
        self.timeout = float(cfg.get("default_timeout", 30))
        self.language = resolve_language(str(cfg.get("default_language", "python"))).name
        self.allow_timeout = bool(cfg.get("allow_model_timeout", False))
        self.allow_language = bool(cfg.get("allow_model_language", False))
        self.max_timeout = float(cfg.get("max_timeout", 60))
        self.stateful = bool(cfg.get("stateful", True))
        self.stateful_python = bool(cfg.get("stateful_python", False))
        self.session_ttl_s = float(cfg.get("session_ttl_s", 600))
        self.max_sessions = int(cfg.get("max_sessions", 256))
        self.max_output_chars = int(cfg.get("max_output_chars", 8000))
        self.deadline_s = float(cfg.get("deadline_s", 120))
        self.fork_from_checkpoint = bool(cfg.get("fork_from_checkpoint", False))
        self.setup_command: str | None = cfg.get("setup_command")
        self.limits: Limits = limits_with(None, timeout=self.timeout, memory_limit_mb=cfg.get("memory_limit_mb", 1024))
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
            forked = await fork_prepared(pool, files, setup, self.limits, timeout=self.timeout)
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
                return await run_cell(slot.session, request.code, request.timeout)
            return await slot.session.run(request.code, language=request.language, timeout=request.timeout)
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


# ---------------------------------------------------------------------------------- function tool


async def code_interpreter(code: str) -> str:
    """Run a Python program in a sandbox and return what it printed and how it ended.

    Args:
        code: The complete program to run.
    """
    settings = {**_DEFAULTS, **env_settings()}
    try:
        language = resolve_language(settings["language"]).name
        limits = limits_with(None, timeout=settings.get("timeout"), memory_limit_mb=settings.get("memory_limit_mb"))
        handle = _handle_for(settings)
        deadline = float(settings["deadline_s"])
        result = await handle.acall(lambda pool: pool.run(code, language=language, limits=limits), deadline + GRACE_S)
    except Exception as exc:
        return format_error(exc)
    return format_result(result)
