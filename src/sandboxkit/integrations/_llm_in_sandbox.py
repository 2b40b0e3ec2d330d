"""LLM-in-Sandbox-RL's task rows, directory layout and reward rules, without its Docker runtime.

LLM-in-Sandbox-RL (``rllm/environments/llm_in_sandbox/``) trains on rows shaped
``{id, domain, problem_statement, ground_truth, [input_files], [qa_type]}``: the input files
are copied under ``{working_dir}/documents``, the model works with bash and an editor and
writes its final answer to ``{output_dir}/answer.txt``, and the episode is scored from that
file against ``ground_truth``, routed by ``domain`` (its ``instruct_pretrain`` reward):

==========================================  =============================================
domain / qa_type                            rule
==========================================  =============================================
``math*``, ``physics*``                     math-verify: gold as LaTeX, answer as expression or
                                            LaTeX, the last ``\\boxed{}`` if any (1.0 / 0.0)
``chem*``, ``biomed*``                      one multiple-choice letter (1.0 / 0.0)
``instruct_pretrain*``, ``long_context*``   by ``qa_type``: "multiple choice" with one letter as
                                            above, with several (comma-separated) the F1 of the
                                            letter sets; otherwise (open-ended) 1.0 when
                                            math-verify agrees, else ROUGE-L F (stemmed)
``instruct_follow*``                        IFBench (not bundled: no reward, flagged)
==========================================  =============================================

An empty answer or an empty ground truth scores 0.0, as upstream. This module only holds
the rules; :class:`~sandboxkit.integrations.rllm.SandboxEnv` applies them to its sandbox,
so the same rows train on any backend.

Blame: what the answer can cause is its score. An answer built to hang the math scorer (deep
nesting, megabytes of LaTeX, a tower of powers) scores 0.0 within its own limits and holds up
no other episode (see :mod:`._math_worker`); ``status`` says which limit it met. A row that
cannot be graded for a reason the answer cannot cause (unknown domain, a missing scorer, a
stuck or killed math worker) gives ``reward=None``: "no reward", never a 0.0 that would teach
the policy that a right answer is wrong.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandboxkit.integrations._math_worker import MathWorkerError, extract_boxed, math_worker

__all__ = [
    "ANSWER_FILE",
    "DEFAULT_WORKING_DIR",
    "Layout",
    "Score",
    "input_files",
    "is_llm_in_sandbox_row",
    "multiple_choice_letter",
    "question_type",
    "rouge_l",
    "score_answer",
]

DEFAULT_WORKING_DIR = "/testbed"
ANSWER_FILE = "answer.txt"


@dataclass(frozen=True)
class Layout:
    """Where a row's files live: the working directory, the input documents and the answer's directory."""

    working_dir: str = DEFAULT_WORKING_DIR
    input_dir: str = DEFAULT_WORKING_DIR + "/documents"
    output_dir: str = DEFAULT_WORKING_DIR

    @classmethod
    def from_row(cls, row: Mapping[str, Any], working_dir: str | None = None) -> Layout:
        """The layout a row asks for (``working_dir`` / ``input_dir`` / ``output_dir`` keys), as upstream.

        Raises:
            ValueError: a directory is not an absolute path.
        """
        work = str(row.get("working_dir") or working_dir or DEFAULT_WORKING_DIR)
        layout = cls(
            working_dir=posixpath.normpath(work),
            input_dir=posixpath.normpath(str(row.get("input_dir") or f"{work}/documents")),
            output_dir=posixpath.normpath(str(row.get("output_dir") or work)),
        )
        for name, value in vars(layout).items():
            if not value.startswith("/"):
                raise ValueError(f"{name} must be an absolute path like '/testbed', got {value!r}")
        return layout

    @property
    def answer_path(self) -> str:
        """The absolute path of the answer file."""
        return posixpath.join(self.output_dir, ANSWER_FILE)


def is_llm_in_sandbox_row(row: Mapping[str, Any]) -> bool:
    """Whether a row is graded by LLM-in-Sandbox's rules (it has ``ground_truth`` and ``domain``)."""
    return "ground_truth" in row and "domain" in row


def input_files(row: Mapping[str, Any], layout: Layout) -> dict[str, bytes]:
    """The row's ``input_files`` (a mapping or its JSON text) as absolute paths under ``input_dir``.

    ``None`` contents are skipped, as upstream does.

    Raises:
        ValueError: ``input_files`` is not a mapping of file name to text, or a name escapes
            ``input_dir``.
    """
    raw = row.get("input_files")
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() else {}
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"input_files must map file names to text, got {type(raw).__name__}")
    out: dict[str, bytes] = {}
    for name, body in raw.items():
        if body is None:
            continue
        path = posixpath.normpath(posixpath.join(layout.input_dir, str(name)))
        if not path.startswith(layout.input_dir.rstrip("/") + "/"):
            raise ValueError(f"input file {name!r} escapes {layout.input_dir}")
        out[path] = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    return out


@dataclass(frozen=True)
class Score:
    """A graded answer: ``reward`` (``None`` = could not be graded) and why."""

    reward: float | None
    status: str
    detail: str = ""


def question_type(qa_type: Any, ground_truth: str) -> str:
    """``"mc_single"``, ``"mc_multiple"`` (a comma in the truth) or ``"open_ended"``, from a row's ``qa_type``."""
    if isinstance(qa_type, str) and "multiple choice" in qa_type.lower():
        return "mc_multiple" if "," in ground_truth else "mc_single"
    return "open_ended"


_MC_PATTERNS = (
    re.compile(r'"answer"\s*:\s*"([A-Z])"', re.IGNORECASE),  # {"answer": "C"}
    re.compile(r"answer\s*[:：]\s*([A-Z])\b", re.IGNORECASE),  # Answer: C
    re.compile(r"(?:answer|choice)\s+is\s+([A-Z])\b", re.IGNORECASE),  # the answer is C
)
_LONE_LETTER = re.compile(r"\b([A-Z])\b")


def multiple_choice_letter(text: str) -> str:
    """The option letter an answer picks, by LLM-in-Sandbox's rules in order ("" if none).

    An explicit "answer: X" form wins; then a ``\\boxed{X...}``; then the last standalone
    letter; then the text's first letter.
    """
    for pattern in _MC_PATTERNS:
        found = pattern.search(text)
        if found:
            return found.group(1).upper()
    stripped = text.strip()
    boxed = extract_boxed(text)
    if boxed != stripped and boxed and boxed[0].isalpha():
        return boxed[0].upper()
    letters = _LONE_LETTER.findall(text.upper())
    if letters:
        return str(letters[-1])
    return stripped[0].upper() if stripped and stripped[0].isalpha() else ""


def _single_choice(answer: str, truth: str) -> float:
    if answer.strip().upper() == truth.strip().upper():
        return 1.0
    return 1.0 if multiple_choice_letter(answer) == truth.strip().upper() else 0.0


def _choice_f1(answer: str, truth: str) -> float:
    picked = {c.strip().upper() for c in answer.split(",") if c.strip()}
    right = {c.strip().upper() for c in truth.split(",") if c.strip()}
    hits = len(picked & right)
    if not picked or not right or not hits:
        return 0.0
    precision, recall = hits / len(picked), hits / len(right)
    return 2 * precision * recall / (precision + recall)


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L F-measure with Porter stemming (the ``rouge-score`` package, as upstream).

    Raises:
        ImportError: ``rouge-score`` is not installed (``pip install 'sandboxkit[rllm]'``).
    """
    try:
        from rouge_score import rouge_scorer  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ImportError("open-ended answers need rouge-score: pip install 'sandboxkit[rllm]'") from exc
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return float(scorer.score(reference, candidate)["rougeL"].fmeasure)


#: Domains (prefixes, lower case) LLM-in-Sandbox-RL's rules grade; instruct_follow needs IFBench.
RULE_DOMAINS = ("math", "physics", "chem", "biomed", "instruct_pretrain", "long_context", "instruct_follow")


def check_domain(domain: Any) -> None:
    """Refuse, before an episode starts, a row graded by LLM-in-Sandbox's rules whose domain has no rule.

    Such a row could only end with no reward after the whole episode ran; the dataset is wrong, not the
    model, so the user hears it at once.

    Raises:
        ValueError: no rule for ``domain``; the message lists the known ones and the alternatives.
    """
    if not str(domain or "").lower().startswith(RULE_DOMAINS):
        raise ValueError(
            f"no LLM-in-Sandbox reward rule for domain {domain!r} (known: {', '.join(RULE_DOMAINS)}); "
            "fix the row's domain, or give it a reward_command or tests"
        )


def score_answer(answer: str, ground_truth: Any, domain: Any, qa_type: Any = None) -> Score:
    """Score one answer as LLM-in-Sandbox-RL's ``instruct_pretrain`` reward does. Never raises."""
    truth = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth)
    answer, truth = answer.strip(), truth.strip()
    if not answer or not truth:
        return Score(0.0, "empty_answer" if not answer else "empty_ground_truth")
    kind = str(domain or "").lower()
    try:
        if kind.startswith(("math", "physics")):
            math = math_worker().check(answer, truth)
            return Score(math.score, "math" if math.status == "compared" else f"math_{math.status}")
        if kind.startswith(("chem", "biomed")):
            return Score(_single_choice(answer, truth), "multiple_choice")
        if kind.startswith("instruct_follow"):
            return Score(None, "ungradable", "instruct_follow rows need IFBench, which sandboxkit does not bundle")
        if not kind.startswith(("instruct_pretrain", "long_context")):
            return Score(None, "unknown_domain", f"no LLM-in-Sandbox reward rule for domain {domain!r}")
        shape = question_type(qa_type, truth)
        if shape == "mc_single":
            return Score(_single_choice(answer, truth), "multiple_choice")
        if shape == "mc_multiple":
            return Score(_choice_f1(answer, truth), "multiple_choice_f1")
        if math_worker().score(answer, truth) > 0:
            return Score(1.0, "open_ended_math")
        return Score(rouge_l(truth, answer), "open_ended_rouge_l")
    except (MathWorkerError, ImportError) as exc:
        return Score(None, "grader_unavailable", str(exc))
