"""The reward of an rLLM episode, from what the model left in its sandbox.

Three ways, chosen by the task row: ``tests`` (the solution file graded by the judge), an
LLM-in-Sandbox-RL row (``answer.txt`` against ``ground_truth``), or ``reward_command`` (exit 0
is 1.0). Each returns the reward and the episode's ``final_info``; nothing raises into the
engine. An infrastructure failure is flagged ``infra_error`` (no reward), a bad task row is
``invalid_task``, never a silent low score.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sandboxkit.errors import SandboxkitError
from sandboxkit.integrations._llm_in_sandbox import Layout, is_llm_in_sandbox_row, score_answer
from sandboxkit.integrations._rllm_editor import EpisodeFiles
from sandboxkit.integrations._rllm_paths import EpisodePaths

__all__ = ["grade_episode"]

log = logging.getLogger("sandboxkit.integrations.rllm")


def grade_episode(
    task: Mapping[str, Any],
    layout: Layout,
    files: EpisodeFiles,
    paths: EpisodePaths,
    call: Callable[[Callable[[Any], Any]], Any],
) -> tuple[float, dict[str, Any]]:
    """The episode's reward and ``final_info``.

    Args:
        task: the dataset row.
        layout: the row's LLM-in-Sandbox-RL layout (where ``answer.txt`` is).
        files: the sandbox's files and shell.
        paths: the episode's path mapping.
        call: runs ``fn(pool)`` on the episode's pool, within its deadline (for the judge).
    """
    tests = task.get("tests")
    command = task.get("reward_command")
    try:
        # What the row says beats what is inferred from it: tests, then an explicit reward_command, and only
        # then LLM-in-Sandbox's rules for a row with ground_truth and domain (an explicit command used to be
        # ignored on such a row, and an empty domain then scored a right answer 0.0 as "unknown_domain").
        if tests is not None:
            return _grade_tests(task, tests, files, call)
        if isinstance(command, str) and command:
            result = files.exec(files.workspace.command(command))
            return (1.0 if result.ok else 0.0), {"reward_status": result.status.value, "infra_error": False}
        if is_llm_in_sandbox_row(task):
            return _grade_answer(task, layout, files, paths)
    except SandboxkitError as exc:
        return 0.0, {"reward_status": "infra_error", "infra_error": True, "error": str(exc)}
    except ValueError as exc:  # a bad solution_path or test data in the task row
        return 0.0, {"reward_status": "invalid_task", "infra_error": False, "error": str(exc)}
    except Exception as exc:  # never raise into the engine; a bug here must still end the episode
        log.exception("grading the episode failed")
        return 0.0, {"reward_status": "grader_error", "infra_error": True, "error": repr(exc)}
    return 0.0, {"reward_status": "no_grader", "infra_error": False}


def _grade_answer(
    task: Mapping[str, Any], layout: Layout, files: EpisodeFiles, paths: EpisodePaths
) -> tuple[float, dict[str, Any]]:
    """LLM-in-Sandbox-RL's reward: ``answer.txt`` against ``ground_truth``, by ``domain``.

    A missing answer file is an empty answer (0.0), as upstream reads it with
    ``cat ... || echo ''``. A row that cannot be graded gives 0.0 with
    ``final_info["reward"] = None`` (no reward), never a silent wrong score.
    """
    content = files.read(paths.sandbox_path(layout.answer_path))
    answer = content.decode("utf-8", errors="replace") if content is not None else ""
    score = score_answer(answer, task.get("ground_truth"), task.get("domain"), task.get("qa_type"))
    info: dict[str, Any] = {
        "reward_status": score.status,
        "reward": score.reward,
        "infra_error": score.status == "grader_unavailable",
        "answer_found": content is not None,
    }
    if score.detail:
        info["error"] = score.detail
    return (score.reward if score.reward is not None else 0.0), info


def _grade_tests(
    task: Mapping[str, Any], tests: Any, files: EpisodeFiles, call: Callable[[Callable[[Any], Any]], Any]
) -> tuple[float, dict[str, Any]]:
    from sandboxkit.judge import grade

    rel = files.workspace.relative(str(task.get("solution_path", "solution.py")))
    content = files.read(rel)
    if content is None:
        return 0.0, {"reward_status": "missing_solution", "infra_error": False}
    language = str(task.get("language", "python"))
    code = content.decode("utf-8", errors="replace")
    verdict = call(lambda p: grade(p, code, tests, language=language))
    info = {"reward_status": verdict.status, "infra_error": bool(verdict.infra_error), "pass_rate": verdict.pass_rate}
    return (float(verdict.reward) if verdict.reward is not None else 0.0), info
