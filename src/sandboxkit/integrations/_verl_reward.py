"""verl's reward function: ``compute_score`` (and its blocking twin) grades one response in a sandbox.

verl (>= 0.7.1) loads it from ``pkg://sandboxkit.integrations.verl`` (re-exported there, see
:mod:`sandboxkit.integrations.verl`). verl has no timeout around reward functions and builds its
extra-info columns from the *first* sample's keys, so ``compute_score`` never raises, never waits
past ``deadline_s``, and returns the same keys on every path.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from sandboxkit.integrations._runtime import GRACE_S, PoolHandle, env_settings, limits_with, shared_handle
from sandboxkit.languages import resolve_language

__all__ = ["DEFAULTS", "SCORE_KEYS", "compute_score", "compute_score_sync", "handle_for"]

log = logging.getLogger("sandboxkit.integrations.verl")

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

DEFAULTS: dict[str, Any] = {
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
    settings = {**DEFAULTS, **env_settings()}
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


def handle_for(settings: Mapping[str, Any]) -> PoolHandle:
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
        limits = limits_with(None, timeout_s=settings.get("timeout"), memory_limit_mb=settings.get("memory_limit_mb"))
        tests = _first_cases(ground_truth, 10) if settings.get("continuous") else ground_truth
        handle = handle_for(settings)
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
                    deadline_s=deadline,
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
