"""A child process that compares math answers with math-verify, one JSON line in, one out.

math-verify bounds its parsing with ``signal.alarm``, which works only in a process's main
thread; called from rLLM's 64-thread pool it refuses and LLM-in-Sandbox's own scorer then
silently returns 0.0 for a right answer. LLM-in-Sandbox-RL avoids that by scoring in a
fresh process per episode. Here one long-lived worker does it in its main thread, so the
timeouts work and sympy is imported once; :class:`MathWorker` (the parent side) serialises
requests, bounds each with a wall clock, and replaces a worker that hangs or dies.

Run as ``python -m sandboxkit.integrations._math_worker``; requests are
``{"answer": str, "ground_truth": str}``, answers ``{"score": float}`` or ``{"error": str}``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import threading
from typing import IO, Any

__all__ = ["MathWorker", "MathWorkerError", "extract_boxed", "math_worker", "shutdown_math_worker"]

log = logging.getLogger(__name__)

#: Seconds one comparison may take (LLM-in-Sandbox-RL waits 60 s for its scoring process).
DEFAULT_TIMEOUT_S = 60.0
#: Seconds the worker may take to start (importing sympy and math-verify on a loaded machine).
START_TIMEOUT_S = 120.0


class MathWorkerError(RuntimeError):
    """The comparison could not be made (math-verify missing, the worker hung or died)."""


def extract_boxed(text: str) -> str:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces may nest), else ``text`` stripped."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return text.strip()
    depth, i = 1, start + len("\\boxed{")
    body_start = i
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[body_start : i - 1].strip() if depth == 0 else text.strip()


def _compare(answer: str, ground_truth: str) -> float:
    """LLM-in-Sandbox's math rule: gold as LaTeX, prediction as expression or LaTeX, both boxed."""
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    gold = "\\boxed{" + ground_truth + "}"
    pred = "\\boxed{" + extract_boxed(answer) + "}"
    try:
        score, _ = verify([gold], [pred])
    except Exception:  # math-verify raises on what it cannot parse; upstream scores that 0.0
        return 0.0
    return float(score)


def _serve(stdin: IO[str], stdout: IO[str]) -> None:
    import math_verify  # noqa: F401 - fail at start (the parent reports it), not on the first request

    stdout.write(json.dumps({"ready": True}) + "\n")
    stdout.flush()
    for line in stdin:
        try:
            request = json.loads(line)
            reply: dict[str, Any] = {"score": _compare(str(request["answer"]), str(request["ground_truth"]))}
        except Exception as exc:  # one bad request must not end the worker
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


class MathWorker:
    """The parent side: one worker process, started on first use, shared by every thread.

    Args:
        timeout_s: seconds one comparison may take before the worker is replaced.
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._pid = os.getpid()

    def score(self, answer: str, ground_truth: str) -> float:
        """math-verify's verdict (0.0 or 1.0) on ``answer`` against ``ground_truth``.

        Raises:
            MathWorkerError: math-verify is not installed, or the worker hung or died.
        """
        request = json.dumps({"answer": answer, "ground_truth": ground_truth}) + "\n"
        with self._lock:
            proc = self._running()
            reply = self._exchange(proc, request, self.timeout_s)
        if "error" in reply:
            raise MathWorkerError(f"math-verify failed: {reply['error']}")
        return float(reply["score"])

    def close(self) -> None:
        """Stop the worker (idempotent; a later :meth:`score` starts a new one)."""
        with self._lock:
            self._stop()

    def _running(self) -> subprocess.Popen[str]:
        if self._pid != os.getpid():  # a forked child must not share the parent's pipes
            self._proc, self._pid = None, os.getpid()
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
        # The child must import this very sandboxkit, however the parent found it.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "sandboxkit.integrations._math_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._proc = proc
        reply = self._exchange(proc, None, START_TIMEOUT_S)
        if not reply.get("ready"):
            self._stop()
            raise MathWorkerError(f"the math-verify worker did not start: {reply}")
        return proc

    def _exchange(self, proc: subprocess.Popen[str], request: str | None, timeout: float) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        box: list[str] = []
        try:
            if request is not None:
                proc.stdin.write(request)
                proc.stdin.flush()
            reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
            reader.start()
            reader.join(timeout)
        except OSError as exc:
            self._stop()
            raise MathWorkerError(f"the math-verify worker died ({exc})") from exc
        if not box or not box[0]:
            hung = not box
            stderr = self._stop()
            if hung:
                raise MathWorkerError(f"the math-verify worker gave no answer within {timeout:g}s")
            hint = " (install math-verify: pip install 'sandboxkit[rllm]')" if "math_verify" in stderr else ""
            raise MathWorkerError(f"the math-verify worker exited{hint}: {stderr[-500:]}")
        parsed: dict[str, Any] = json.loads(box[0])
        return parsed

    def _stop(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        proc.kill()
        try:
            _, stderr = proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            stderr = ""
        return stderr or ""


_worker: MathWorker | None = None
_worker_lock = threading.Lock()


def math_worker() -> MathWorker:
    """The process-wide worker (stopped at interpreter exit)."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = MathWorker()
            atexit.register(_worker.close)
        return _worker


def shutdown_math_worker() -> None:
    """Stop the process-wide worker if it runs (tests call this before counting processes)."""
    with _worker_lock:
        worker = _worker
    if worker is not None:
        worker.close()


if __name__ == "__main__":
    _serve(sys.stdin, sys.stdout)
