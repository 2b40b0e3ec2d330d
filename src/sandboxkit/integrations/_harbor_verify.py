"""Verifying a sandbox the way Harbor's verifier does: ``tests/`` to ``/tests``, run ``test.sh``, read the reward.

Harbor's contract (``harbor/verifier/verifier.py``, ``harbor/models/trial/paths.py``): the task's
``tests/`` directory is copied to ``/tests``, ``/tests/test.sh`` runs after the agent, and the
verdict is ``/logs/verifier/reward.json`` (an object of numbers) or else
``/logs/verifier/reward.txt`` (one number). Anything else is no reward, never 0.
"""

from __future__ import annotations

import json
import math
import posixpath
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandboxkit.errors import InvalidRequest, SandboxError
from sandboxkit.session import Session

if TYPE_CHECKING:
    from sandboxkit.integrations._harbor_task import HarborTask

__all__ = ["REWARD_JSON", "REWARD_TXT", "VERIFIER_DIR", "HarborVerdict", "parse_reward_files", "verify_session"]

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
            only value); ``None`` when there is none to trust (see ``status``).
        rewards: every number ``reward.json`` holds (``{"reward": x}`` for ``reward.txt``).
        status: ``"ok"``, ``"no_reward_file"``, ``"empty_reward_file"``, ``"bad_reward_file"``,
            ``"verifier_timeout"`` or ``"infra_error"``.
        exit_code: ``test.sh``'s exit status (Harbor ignores it; the reward file decides).
        output: the tail of ``test.sh``'s output (``/logs/verifier/test-stdout.txt``).
        detail: why there is no reward, when there is none.
        duration_s: how long verification took.
    """

    reward: float | None
    rewards: dict[str, float] = field(default_factory=dict)
    status: str = "ok"
    exit_code: int | None = None
    output: str = ""
    detail: str = ""
    duration_s: float = 0.0


async def verify_session(task: HarborTask, session: Session) -> HarborVerdict:
    """Upload ``tests/`` to ``/tests``, run ``/tests/test.sh``, read ``/logs/verifier/reward.{json,txt}``.

    Never raises for what the sandbox or the task's files do: a missing or malformed reward
    file, a verifier timeout and an infrastructure failure are verdicts with ``reward=None``.

    Raises:
        InvalidRequest: the session's backend cannot write ``/tests`` (no root filesystem of its own).
    """
    started = time.monotonic()
    if not session.capabilities.absolute_paths:
        raise InvalidRequest(
            "Harbor tasks need real absolute paths (/tests, /logs/verifier): use a backend whose sandboxes have "
            "their own root filesystem (docker, or subprocess with a root filesystem)",
            backend=session.backend_name,
        )

    def verdict(reward: float | None, status: str, **kw: Any) -> HarborVerdict:
        return HarborVerdict(reward, status=status, duration_s=time.monotonic() - started, **kw)

    try:
        # The agent may have written there: only what test.sh writes now counts.
        # (The agent runs as the same user, so whatever it left there can be made writable and removed.)
        cleared = await session.exec(
            f"mkdir -p {VERIFIER_DIR} && chmod -R u+rwX {VERIFIER_DIR} && "
            f"rm -rf {VERIFIER_DIR}/* {VERIFIER_DIR}/.[!.]* {VERIFIER_DIR}/..?* && "
            f'[ -z "$(ls -A {VERIFIER_DIR})" ]',
            timeout=60,
        )
        if not cleared.ok:
            return verdict(None, "infra_error", detail=f"could not empty {VERIFIER_DIR}: {cleared.stderr[-300:]}")
        await session.write_files({posixpath.join(TESTS_DIR, rel): body for rel, body in task.tests.items()})
        result = await session.exec(
            f"chmod +x {TESTS_DIR}/test.sh && {TESTS_DIR}/test.sh > {TEST_STDOUT} 2>&1",
            cwd=task.workdir,
            env=task.verifier_env or None,
            timeout=task.verifier_timeout_s,
        )
        files = await session.read_files([REWARD_JSON, REWARD_TXT, TEST_STDOUT])
    except SandboxError as exc:
        return verdict(None, "infra_error", detail=str(exc))
    output = files.get(TEST_STDOUT, b"")[-4000:].decode("utf-8", errors="replace")
    common = {"exit_code": result.exit_code, "output": output}
    if result.status.value == "timeout":
        return verdict(None, "verifier_timeout", detail=f"test.sh ran past {task.verifier_timeout_s:g}s", **common)
    reward, rewards, status, detail = parse_reward_files(files.get(REWARD_JSON), files.get(REWARD_TXT))
    return verdict(reward, status, rewards=rewards, detail=detail, **common)


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
