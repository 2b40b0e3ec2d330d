"""Verifying a sandbox the way Harbor's verifier does, out of the agent's reach.

Harbor's contract (``harbor/verifier/verifier.py``, ``harbor/models/trial/paths.py``): the task's
``tests/`` directory is copied to ``/tests``, ``/tests/test.sh`` runs after the agent, and the
verdict is ``/logs/verifier/reward.json`` (an object of numbers) or else
``/logs/verifier/reward.txt`` (one number).

Harbor runs ``test.sh`` in the agent's own container. Here it runs in a fresh sandbox of the
same pool (the task's image, untouched) into which the agent's final working directory is
carried (:mod:`._harbor_workspace`): the agent's processes (kernels and their threads
included) are not there, ``/tests`` is the task's own, ``/logs/verifier`` is new, and the
interpreter and tools are the image's, which the agent could not change.

Blame: once ``test.sh`` runs there, the only thing the agent decided is its workspace, so
every outcome is the agent's: a reward file that is missing, empty or not a number, and a
verifier that runs past its timeout, all score 0.0 (the ``status`` says which; a task whose
oracle solution does not reach 1.0 is broken, see :meth:`HarborTask.solve`). ``None`` is kept
for a sandbox that failed (``infra_error``), which the agent cannot cause.
"""

from __future__ import annotations

import json
import math
import posixpath
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from sandboxkit.base import Capabilities
from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.integrations._harbor_workspace import (
    WorkspaceCopy,
    WorkspaceUnreadable,
    capture_workspace,
    restore_workspace,
)
from sandboxkit.models import Limits, Status
from sandboxkit.session import Session

if TYPE_CHECKING:
    from sandboxkit.pool import SandboxPool

__all__ = [
    "REWARD_JSON",
    "REWARD_TXT",
    "VERIFIER_DIR",
    "HarborVerdict",
    "capture_workspace",
    "parse_reward_files",
    "verify_session",
    "verify_workspace",
]

TESTS_DIR = "/tests"
VERIFIER_DIR = "/logs/verifier"
REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
TEST_STDOUT = "/logs/verifier/test-stdout.txt"


@dataclass(frozen=True)
class HarborVerdict:
    """What verifying one sandbox gave.

    Attributes:
        reward: the reward (``reward.txt``'s number, or ``reward.json``'s ``"reward"`` key or
            only value); 0.0 when ``test.sh`` gave none or ran past its timeout (the agent's
            outcome); ``None`` only when a sandbox failed (``status == "infra_error"``).
        rewards: every number ``reward.json`` holds (``{"reward": x}`` for ``reward.txt``).
        status: ``"ok"``, ``"no_reward_file"``, ``"empty_reward_file"``, ``"bad_reward_file"``,
            ``"verifier_timeout"``, ``"workspace_unreadable"`` or ``"infra_error"``.
        exit_code: ``test.sh``'s exit status (Harbor ignores it; the reward file decides).
        output: the tail of ``test.sh``'s output (``/logs/verifier/test-stdout.txt``).
        detail: why the reward is not the reward file's number, when it is not; and what of the
            agent's workspace was left out.
        duration_s: how long verification took.
    """

    reward: float | None
    rewards: dict[str, float] = field(default_factory=dict)
    status: str = "ok"
    exit_code: int | None = None
    output: str = ""
    detail: str = ""
    duration_s: float = 0.0


def _check_backend(capabilities: Capabilities, name: str) -> None:
    if not capabilities.absolute_paths:
        raise InvalidRequest(
            "Harbor tasks need real absolute paths (/tests, /logs/verifier): use a backend whose sandboxes have "
            "their own root filesystem (docker, or subprocess with a root filesystem)",
            backend=name,
        )


class VerifiedTask(Protocol):
    """What verifying needs of a :class:`~sandboxkit.integrations.harbor.HarborTask` (which has it all).

    Named here rather than imported: the task calls :func:`verify_session`, so importing the task's
    module back would make the two files a circle.
    """

    @property
    def workdir(self) -> str: ...
    @property
    def tests(self) -> Mapping[str, bytes]: ...
    @property
    def verifier_env(self) -> Mapping[str, str]: ...
    @property
    def verifier_timeout_s(self) -> float: ...


async def verify_session(task: VerifiedTask, session: Session, pool: SandboxPool) -> HarborVerdict:
    """Carry ``session``'s working directory into a fresh sandbox of ``pool`` and run ``test.sh`` there.

    ``session`` (the agent's) is only read: its processes keep running in its own sandbox,
    where they cannot reach the verifier's. ``pool`` must be the one ``session`` came from
    (the fresh sandbox must be the same image). :class:`HarborEnv` closes the agent's sandbox
    before verifying; see :func:`verify_workspace`.

    Never raises for what the agent or the task's files do; see :class:`HarborVerdict`.

    Raises:
        InvalidRequest: the backend has no root filesystem of its own (no real ``/tests``).
    """
    started = time.monotonic()
    _check_backend(session.capabilities, session.backend_name)
    try:
        copy = await capture_workspace(session, task.workdir)
    except WorkspaceUnreadable as exc:
        return HarborVerdict(0.0, status="workspace_unreadable", detail=str(exc), duration_s=_since(started))
    except SandboxError as exc:
        if isinstance(exc, InvalidRequest):
            raise
        return HarborVerdict(None, status="infra_error", detail=str(exc), duration_s=_since(started))
    verdict = await verify_workspace(task, pool, copy, limits=session.limits)
    return replace(verdict, duration_s=_since(started))


async def verify_workspace(
    task: VerifiedTask, pool: SandboxPool, copy: WorkspaceCopy, *, limits: Limits | None = None
) -> HarborVerdict:
    """Run the task's ``test.sh`` in a fresh sandbox of ``pool`` holding ``copy`` as its working directory.

    The fresh sandbox is the task's image as built (a warm one was reset, which gives the same);
    ``/tests`` is written from the task, ``/logs/verifier`` emptied, and the sandbox is closed
    afterwards.

    Raises:
        InvalidRequest: the backend has no root filesystem of its own (no real ``/tests``).
    """
    started = time.monotonic()
    _check_backend(pool.backend.capabilities, pool.backend.name)

    def verdict(reward: float | None, status: str, **kw: Any) -> HarborVerdict:
        if copy.dropped:
            left_out = f"left out of the agent's workspace: {'; '.join(copy.dropped[:5])}"
            kw["detail"] = f"{kw['detail']}; {left_out}" if kw.get("detail") else left_out
        return HarborVerdict(reward, status=status, duration_s=_since(started), **kw)

    try:
        async with pool.session(limits=limits) as fresh:
            try:
                await restore_workspace(fresh, copy)
            except InvalidRequest as exc:  # a name or body the file API refuses: the agent chose it
                return verdict(0.0, "workspace_unreadable", detail=f"the agent's workspace cannot be restored: {exc}")
            # The image may bring its own /tests or /logs/verifier: the task's tests and an empty directory count.
            cleared = await fresh.exec(
                f"rm -rf {TESTS_DIR}/* {TESTS_DIR}/.[!.]* {VERIFIER_DIR}/* {VERIFIER_DIR}/.[!.]* 2>/dev/null; "
                f'mkdir -p {VERIFIER_DIR} && [ -z "$(ls -A {VERIFIER_DIR})" ]',
                timeout_s=60,
            )
            if not cleared.ok:  # the image as built cannot hold the verifier's files: not the agent's doing
                return verdict(None, "infra_error", detail=f"could not prepare {VERIFIER_DIR}: {cleared.stderr[-300:]}")
            await fresh.write_files({posixpath.join(TESTS_DIR, rel): body for rel, body in task.tests.items()})
            result = await fresh.exec(
                f"chmod +x {TESTS_DIR}/test.sh && {TESTS_DIR}/test.sh > {TEST_STDOUT} 2>&1",
                cwd=task.workdir,
                env=task.verifier_env or None,
                timeout_s=task.verifier_timeout_s,
            )
            try:
                files = await fresh.read_files([REWARD_JSON, REWARD_TXT, TEST_STDOUT])
            except (
                InvalidRequest
            ) as exc:  # the agent's code, run by test.sh, made a file a link the host may not follow
                return verdict(0.0, "bad_reward_file", detail=f"the verifier's files cannot be read: {exc}")
    except SandboxError as exc:
        return verdict(None, "infra_error", detail=str(exc))
    output = files.get(TEST_STDOUT, b"")[-4000:].decode("utf-8", errors="replace")
    common = {"exit_code": result.exit_code, "output": output}
    if result.status is Status.TIMEOUT:
        return verdict(0.0, "verifier_timeout", detail=f"test.sh ran past {task.verifier_timeout_s:g}s", **common)
    reward, rewards, status, detail = parse_reward_files(files.get(REWARD_JSON), files.get(REWARD_TXT))
    return verdict(reward if reward is not None else 0.0, status, rewards=rewards, detail=detail, **common)


def _since(started: float) -> float:
    return time.monotonic() - started


def parse_reward_files(
    reward_json: bytes | None, reward_txt: bytes | None
) -> tuple[float | None, dict[str, float], str, str]:
    """Harbor's reading of the verifier's output: ``reward.json`` first, then ``reward.txt``.

    Returns:
        ``(reward, rewards, status, detail)``; ``reward`` is ``None`` unless the file holds a
        finite number (``reward.json``: its ``"reward"`` key, or its only value).
    """
    if reward_json is not None:
        name, raw = "reward.json", reward_json
    elif reward_txt is not None:
        name, raw = "reward.txt", reward_txt
    else:
        return None, {}, "no_reward_file", f"test.sh wrote neither {REWARD_JSON} nor {REWARD_TXT}"
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None, {}, "empty_reward_file", f"{name} is empty"
    try:
        if name == "reward.txt":
            rewards = {"reward": float(text)}
        else:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            rewards = {str(k): float(v) for k, v in data.items() if not isinstance(v, bool)}
            if len(rewards) != len(data):
                raise ValueError("a value is not a number")
    except (ValueError, TypeError) as exc:
        return None, {}, "bad_reward_file", f"{name} does not hold numbers ({exc}): {text[:200]!r}"
    if not all(math.isfinite(v) for v in rewards.values()):
        return None, {}, "bad_reward_file", f"{name} holds a non-finite number: {text[:200]!r}"
    if "reward" in rewards:
        return rewards["reward"], rewards, "ok", ""
    if len(rewards) == 1:
        return next(iter(rewards.values())), rewards, "ok", ""
    return None, rewards, "bad_reward_file", f"{name} has several rewards and none is named 'reward'"
