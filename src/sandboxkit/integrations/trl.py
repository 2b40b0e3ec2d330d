"""TRL adapter: ``SandboxReward``, a GRPO reward function that runs completions against tests.

TRL calls every reward function with keywords only::

    reward_func(prompts=..., completions=..., completion_ids=..., **columns) -> list[float | None]

where ``columns`` holds every other dataset column, one value per completion. TRL >= 0.27
awaits coroutine reward functions (callable objects too since the ``is_async_callable``
fix) on its own daemon loop, gathering them concurrently; older TRL calls them inline.
``SandboxReward`` is awaitable; :meth:`SandboxReward.as_sync` gives the blocking twin for
older TRL, and :meth:`SandboxReward.for_trl` picks the right one for the installed TRL.

Contract kept with the trainer: one value per completion, in order; ``None`` (TRL's "not
applicable": the sample is left out of the group baseline) when the sandbox
infrastructure failed or the row's tests could not be read; never an exception; never a
wait past ``deadline_s``. TRL has no timeout of its own around reward functions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sandboxkit.integrations._runtime import GRACE_S, BackendLike, PoolHandle, run_blocking
from sandboxkit.models import Limits
from sandboxkit.pool import SandboxPool

__all__ = ["SandboxReward", "SyncSandboxReward"]

log = logging.getLogger(__name__)


class SandboxReward:
    """A TRL reward function backed by a sandbox pool and the judge.

    Args:
        backend: backend name or config (``DockerConfig(...)``, or a ``{"kind": ...}`` mapping),
            Backend instance or SyncSandboxPool (see ``PoolHandle``).
        language: language completions are graded as (a ``language`` dataset column overrides it per row).
        shaping: the judge's shaping (``"pass_rate"``, ``"binary"``... or a ``Shaping``).
        banned_patterns: substrings that fail a completion before it runs.
        max_concurrency: programs running at once (the pool's cap).
        tests_column: dataset column holding each row's tests (any shape the judge accepts).
        language_column: dataset column that, when present, gives each row's language.
        limits: limits of every test run.
        compare: the judge's output-comparison options.
        isolate_asserts: run Python assert tests outside the solution's process, so a wrong completion
            cannot forge a pass (default; see :mod:`sandboxkit.judge.isolated`). ``False`` trusts the
            solution's process (about twice as fast on assert cases).
        deadline_s: wall-clock bound on grading one batch; completions not graded by then get ``None``.
            The judge gets the same bound: when a program's own timeouts use it up, its remaining cases
            are charged as timeouts (a 0, not ``None``), so a policy cannot dodge a zero by being slow.
        name: the name TRL logs the reward under (``rewards/<name>/mean``).
        pool_options: more :class:`~sandboxkit.pool.SandboxPool` options (retries, creation_rate...).
        backend_options: options of the backend when ``backend`` is a name (checked against its config).

    Raises:
        InvalidRequest: a backend option is unknown or invalid (the message lists the valid ones).
        BackendNotFound: no backend has that name.
    """

    def __init__(
        self,
        backend: BackendLike = "subprocess",
        *,
        language: str = "python",
        shaping: Any = "pass_rate",
        banned_patterns: Sequence[str] = (),
        max_concurrency: int = 16,
        tests_column: str = "tests",
        language_column: str | None = "language",
        limits: Limits | None = None,
        compare: Any = None,
        isolate_asserts: bool = True,
        deadline_s: float = 300.0,
        name: str = "sandbox_reward",
        pool_options: Mapping[str, Any] | None = None,
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.__name__ = name
        self.language = language
        self.shaping = shaping
        self.banned_patterns = tuple(banned_patterns)
        self.tests_column = tests_column
        self.language_column = language_column
        self.limits = limits
        self.compare = compare
        self.isolate_asserts = isolate_asserts
        self.deadline_s = deadline_s
        options: dict[str, Any] = {"max_concurrency": max_concurrency, **dict(pool_options or {})}
        if backend_options:
            options["backend_options"] = dict(backend_options)
        options.setdefault("deadline_s", deadline_s)
        self.handle = PoolHandle(backend, **options)
        #: Verdicts of the last batch, in order (``None`` where grading did not finish).
        self.last_verdicts: list[Any] = []

    # ------------------------------------------------------------------ shared logic

    def _batch(self, completions: Sequence[Any] | None, columns: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
        items = list(completions or [])
        tests = columns.get(self.tests_column)
        if tests is None:
            log.error(
                "%s: the batch has no %r column (columns: %s); every completion gets None. Set tests_column= to the "
                "column holding the tests, and keep GRPOConfig.remove_unused_columns=False",
                self.__name__,
                self.tests_column,
                sorted(k for k in columns if not callable(columns[k])),
            )
            return items, [None] * len(items)
        tests = list(tests)
        if len(tests) != len(items):
            log.error(
                "%s: %d completions but %d tests; every completion gets None", self.__name__, len(items), len(tests)
            )
            return items, [None] * len(items)
        return items, tests

    def _languages(self, n: int, columns: Mapping[str, Any]) -> list[str]:
        col = columns.get(self.language_column) if self.language_column else None
        if isinstance(col, Sequence) and not isinstance(col, str) and len(col) == n:
            return [str(v) if v else self.language for v in col]
        return [self.language] * n

    async def _grade_all(
        self, pool: SandboxPool, items: list[Any], tests: list[Any], languages: list[str]
    ) -> list[Any]:
        """On the pool's loop: grade every completion concurrently, each bounded by the deadline."""
        from sandboxkit.judge import grade

        async def one(completion: Any, row_tests: Any, language: str) -> Any:
            if row_tests is None:
                return None
            try:
                return await asyncio.wait_for(
                    grade(
                        pool,
                        completion,
                        row_tests,
                        language=language,
                        shaping=self.shaping,
                        banned_patterns=self.banned_patterns,
                        limits=self.limits,
                        compare=self.compare,
                        isolate_asserts=self.isolate_asserts,
                        deadline_s=self.deadline_s,
                    ),
                    self.deadline_s,
                )
            except (TimeoutError, asyncio.TimeoutError):
                log.warning(
                    "%s: grading a completion passed the %gs deadline; reward None", self.__name__, self.deadline_s
                )
                return None
            except Exception:  # a judge or backend bug: no signal for this sample, the batch goes on
                log.exception("%s: grading a completion failed; reward None", self.__name__)
                return None

        return list(
            await asyncio.gather(*(one(c, t, lang) for c, t, lang in zip(items, tests, languages, strict=True)))
        )

    def _rewards(self, verdicts: list[Any], n: int, columns: Mapping[str, Any]) -> list[float | None]:
        if len(verdicts) != n:
            verdicts = [None] * n
        self.last_verdicts = verdicts
        rewards = [None if v is None or v.reward is None else float(v.reward) for v in verdicts]
        _log_to_trainer(self.__name__, verdicts, columns)
        return rewards

    # ------------------------------------------------------------------ the two surfaces

    async def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Any] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        """Grade a batch; one reward per completion (``None`` = infrastructure failure). Never raises."""
        items, tests = self._batch(completions, columns)
        if not items:
            return []
        languages = self._languages(len(items), columns)
        try:
            verdicts = await self.handle.acall(
                lambda pool: self._grade_all(pool, items, tests, languages), self.deadline_s + GRACE_S
            )
        except Exception as exc:
            log.error("%s: the batch could not be graded (%s); every completion gets None", self.__name__, exc)
            verdicts = [None] * len(items)
        return self._rewards(verdicts, len(items), columns)

    def grade_sync(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        """Blocking form of ``__call__`` (runs it; what :meth:`as_sync` calls). Never raises."""
        return run_blocking(self(prompts=prompts, completions=completions, **columns))

    def as_sync(self) -> SyncSandboxReward:
        """A plain (blocking) callable sharing this reward's pool, for TRL < 0.27."""
        return SyncSandboxReward(self)

    def for_trl(self) -> SandboxReward | SyncSandboxReward:
        """``self`` if the installed TRL awaits callable objects, else :meth:`as_sync`."""
        try:
            from trl.trainer.utils import is_async_callable  # type: ignore[import-not-found]
        except ImportError:
            return self.as_sync()
        try:
            return self if is_async_callable(self) else self.as_sync()
        except Exception:
            return self.as_sync()

    def close(self) -> None:
        """Close the pool (also done at interpreter exit). Idempotent."""
        self.handle.close()

    def __enter__(self) -> SandboxReward:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # TRL's async GRPO pickles reward functions into a child process: ship settings, not the pool.
        state = dict(self.__dict__)
        state["last_verdicts"] = []
        return state

    def __repr__(self) -> str:
        return f"<SandboxReward {self.__name__!r} backend={self.handle.backend_name!r}>"


class SyncSandboxReward:
    """The blocking twin of a :class:`SandboxReward` (same pool, same name)."""

    def __init__(self, reward: SandboxReward) -> None:
        self.reward = reward
        self.__name__ = reward.__name__

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Any] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        """Grade a batch, blocking; see :meth:`SandboxReward.__call__`."""
        return self.reward.grade_sync(prompts=prompts, completions=completions, **columns)

    def close(self) -> None:
        """Close the shared pool."""
        self.reward.close()


def _log_to_trainer(name: str, verdicts: list[Any], columns: Mapping[str, Any]) -> None:
    """Report statuses through TRL's ``log_extra`` / ``log_metric`` hooks when the trainer passes them."""
    log_extra = columns.get("log_extra")
    log_metric = columns.get("log_metric")
    try:
        if callable(log_extra):
            log_extra(f"{name}_status", [v.status if v is not None else "deadline" for v in verdicts])
        if callable(log_metric) and verdicts:
            failed = sum(1 for v in verdicts if v is None or v.infra_error)
            log_metric(f"{name}/infra_failure_rate", failed / len(verdicts))
    except Exception:  # logging must never break training
        log.debug("logging to the trainer failed", exc_info=True)
