"""Child processes that compare math answers with math-verify, one JSON line in, one out, each answer bounded.

math-verify bounds its parsing with ``signal.alarm``, which works only in a process's main
thread; called from rLLM's 64-thread pool it refuses and LLM-in-Sandbox's own scorer then
silently returns 0.0 for a right answer. LLM-in-Sandbox-RL avoids that by scoring in a
fresh process per episode. Here a few long-lived workers do it in their main thread, so the
timeouts work and sympy is imported once per worker.

The answer is the model's, so it may be built to hang the scorer: 20,000 nested braces, a
megabyte of LaTeX, ``9^{9^{9^{9}}}`` (sympy computes the power in C, where no alarm reaches).
Three limits make such an answer score 0.0 (its own outcome) without holding anyone else up:

* before anything runs, the part of the answer that is compared (the last ``\\boxed{}``, else
  the text) is refused over :data:`MAX_ANSWER_CHARS` or nested deeper than
  :data:`MAX_BRACE_DEPTH` (upstream's math-verify would time out on such input and score 0);
* each answer has :data:`ANSWER_CPU_S` seconds of the worker's CPU (read from
  ``/proc/<pid>/stat`` while waiting); past it the worker is killed and replaced. CPU time, not
  wall time, so a loaded machine does not turn a right answer into a 0;
* the workers run in parallel (:data:`DEFAULT_WORKERS`), each behind its own lock, so one
  hostile answer holds one worker and the others keep answering.

What the answer cannot cause stays "no reward" (:class:`MathWorkerError`, ``None`` upstream of
here): math-verify missing, a worker that does not start, one that answers nothing for
:data:`ANSWER_WALL_S` seconds while using under 5% of a core (stopped, starved), one killed by SIGKILL
(the OOM killer, an operator). A worker that crashes otherwise while comparing (a segfault in
a parser's recursion, a MemoryError under its address-space limit) is the answer's doing: 0.0.

Run as ``python -m sandboxkit.integrations._math_worker``; requests are
``{"answer": str, "ground_truth": str}``, answers ``{"score": float}`` or ``{"error": str}``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

__all__ = [
    "ANSWER_CPU_S",
    "MAX_ANSWER_CHARS",
    "MAX_BRACE_DEPTH",
    "MathScore",
    "MathWorker",
    "MathWorkerError",
    "extract_boxed",
    "math_worker",
    "shutdown_math_worker",
]

log = logging.getLogger(__name__)

#: CPU seconds one comparison may use; math-verify's own parse and verify timeouts are 5 s each.
ANSWER_CPU_S = 10.0
#: Seconds without an answer after which a worker that used (almost) no CPU is taken as stuck.
ANSWER_WALL_S = 60.0
#: "Almost no CPU": under this share of the wall time waited (a worker starved that far is the host's problem).
STUCK_CPU_SHARE = 0.05
#: Longest compared text (the boxed part, else the whole answer): a final math answer is far shorter.
MAX_ANSWER_CHARS = 16_384
#: Deepest ``{}`` nesting compared; math-verify's parsers recurse per level.
MAX_BRACE_DEPTH = 100
#: Workers at most, started as concurrent requests need them (at least 2: one hostile answer holds one).
DEFAULT_WORKERS = max(2, min(4, os.cpu_count() or 1))
#: Address space of a worker (sympy and math-verify need ~0.5 GiB): a runaway bignum fails there.
WORKER_MEMORY_BYTES = 4 << 30
#: Seconds a worker may take to start (importing sympy and math-verify on a loaded machine).
START_TIMEOUT_S = 120.0
_POLL_S = 0.05
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class MathWorkerError(RuntimeError):
    """The comparison could not be made for a reason the answer cannot cause (math-verify missing, a stuck worker)."""


@dataclass(frozen=True)
class MathScore:
    """One comparison: ``score`` (0.0 or 1.0) and how it was reached.

    ``status`` is ``"compared"`` (math-verify decided), ``"too_long"``, ``"too_deep"`` (refused
    before comparing), ``"cpu_limit"`` (killed at :data:`ANSWER_CPU_S`) or ``"crashed"`` (the
    worker died on this answer); all but the first score 0.0.
    """

    score: float
    status: str = "compared"


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


def _brace_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif char == "}":
            depth = max(0, depth - 1)
    return deepest


def _refusal(compared: str) -> MathScore | None:
    """0.0 for an answer too large or too deep to compare safely, before any worker sees it."""
    if len(compared) > MAX_ANSWER_CHARS:
        return MathScore(0.0, "too_long")
    if _brace_depth(compared) > MAX_BRACE_DEPTH:
        return MathScore(0.0, "too_deep")
    return None


def _compare(answer: str, ground_truth: str) -> float:
    """LLM-in-Sandbox's math rule: gold as LaTeX, prediction as expression or LaTeX, both boxed."""
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    gold = "\\boxed{" + ground_truth + "}"
    pred = "\\boxed{" + answer + "}"
    try:
        score, _ = verify([gold], [pred])
    except Exception:  # math-verify raises on what it cannot parse; upstream scores that 0.0
        return 0.0
    return float(score)


def _serve(stdin: IO[str], stdout: IO[str]) -> None:
    import resource

    import math_verify  # noqa: F401 - fail at start (the parent reports it), not on the first request

    try:  # a runaway bignum raises MemoryError here instead of taking the host's memory
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):
        pass
    _compare("1", "1")  # math-verify imports its parsers on first use: not on the first answer's CPU budget
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


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of stat(5)


class _Child:
    """One worker process; used by one thread at a time (the pool hands it out)."""

    def __init__(self, generation: int) -> None:
        self.generation = generation  # the pool's close() count when started: an older one is not reused
        env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
        # The child must import this very sandboxkit, however the parent found it.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        # A file, not a pipe: a chatty child can never block on it. Closed in stop().
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandboxkit.integrations._math_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._buffer = b""
        try:
            reply = self._read_line(START_TIMEOUT_S, cpu_limit=None)
        except MathWorkerError:
            self.stop()
            raise
        if reply is None or not json.loads(reply).get("ready"):
            stderr = self.stop()
            hint = " (install math-verify: pip install 'sandboxkit[rllm]')" if "math_verify" in stderr else ""
            raise MathWorkerError(f"the math-verify worker did not start{hint}: {stderr[-500:]}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, answer: str, ground_truth: str, cpu_s: float, wall_s: float) -> MathScore:
        """Compare one answer within ``cpu_s`` seconds of CPU (and ``wall_s`` of no progress).

        Raises:
            MathWorkerError: the worker is stuck without using CPU, was SIGKILLed, or math-verify failed.
        """
        assert self.proc.stdin is not None
        line = json.dumps({"answer": answer, "ground_truth": ground_truth}).encode() + b"\n"
        try:
            self.proc.stdin.write(line)  # refused answers are short: this fits the pipe, it cannot block
            self.proc.stdin.flush()
        except OSError:
            pass  # a worker that died since its last answer: the read below says how
        reply = self._read_line(wall_s, cpu_limit=cpu_s)
        if reply is None:
            return MathScore(0.0, "cpu_limit")
        parsed: dict[str, Any] = json.loads(reply)
        if "error" in parsed:
            raise MathWorkerError(f"math-verify failed: {parsed['error']}")
        return MathScore(float(parsed["score"]))

    def _read_line(self, wall_s: float, cpu_limit: float | None) -> bytes | None:
        """The next line, or None when the worker spent ``cpu_limit`` CPU seconds on it (it is then killed).

        Raises:
            MathWorkerError: no line within ``wall_s`` while using under :data:`STUCK_CPU_SHARE` of
                it in CPU (any CPU while starting, ``cpu_limit`` None), or the worker
                died by SIGKILL; a worker that died otherwise is the request's doing (crashed).
        """
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        started, cpu_start = time.monotonic(), _cpu_seconds(self.proc.pid)
        while b"\n" not in self._buffer:
            cpu_used = _cpu_seconds(self.proc.pid) - cpu_start
            if cpu_limit is not None and cpu_used > cpu_limit:
                self.stop()
                return None
            elapsed = time.monotonic() - started
            if elapsed > wall_s and (cpu_limit is None or cpu_used < STUCK_CPU_SHARE * elapsed):
                self.stop()
                raise MathWorkerError(f"the math-verify worker gave no answer within {wall_s:g}s")
            ready, _, _ = select.select([fd], [], [], _POLL_S)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the worker died
                stderr = self.stop()
                code = self.proc.returncode
                if cpu_limit is None or code == -signal.SIGKILL:
                    raise MathWorkerError(f"the math-verify worker exited ({code}): {stderr[-500:]}")
                log.info("the math-verify worker died (%s) comparing an answer: scored 0", code)
                raise _Crashed
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def stop(self) -> str:
        """Kill the worker (idempotent); returns the tail of its stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        try:
            self._stderr.seek(0)
            text = self._stderr.read()[-4000:].decode("utf-8", errors="replace")
            self._stderr.close()
        except (OSError, ValueError):
            text = ""
        return text


class _Crashed(Exception):
    """The worker died comparing an answer (not by SIGKILL): the answer's outcome."""


class MathWorker:
    """The parent side: up to ``workers`` worker processes, started as concurrent requests need them.

    Thread-safe; every thread of the process shares the one :func:`math_worker`.

    Args:
        workers: most worker processes at once.
        cpu_s: CPU seconds one answer may use (then it scores 0.0).
        wall_s: seconds a worker may go without answering while using no CPU (then :class:`MathWorkerError`).
    """

    def __init__(
        self, workers: int = DEFAULT_WORKERS, *, cpu_s: float = ANSWER_CPU_S, wall_s: float = ANSWER_WALL_S
    ) -> None:
        self.workers = max(1, workers)
        self.cpu_s = cpu_s
        self.wall_s = wall_s
        self._cond = threading.Condition()
        self._idle: list[_Child] = []
        self._count = 0  # started or starting, idle or busy
        self._pid = os.getpid()
        self._closed_gen = 0

    def score(self, answer: str, ground_truth: str) -> float:
        """math-verify's verdict (0.0 or 1.0) on ``answer`` against ``ground_truth``; see :meth:`check`.

        Raises:
            MathWorkerError: as :meth:`check`.
        """
        return self.check(answer, ground_truth).score

    def check(self, answer: str, ground_truth: str) -> MathScore:
        """Compare the last ``\\boxed{}`` of ``answer`` (else all of it) with ``ground_truth``, within the limits.

        Raises:
            MathWorkerError: math-verify is not installed, or the comparison failed for a reason
                the answer cannot cause (see the module docstring).
        """
        compared = extract_boxed(answer)
        refused = _refusal(compared)
        if refused is not None:
            return refused
        child = self._checkout()
        try:
            return child.ask(compared, ground_truth, self.cpu_s, self.wall_s)
        except _Crashed:
            return MathScore(0.0, "crashed")
        finally:
            self._checkin(child)

    def close(self) -> None:
        """Stop the idle workers, and busy ones as they finish (idempotent; a later call starts new ones)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._closed_gen += 1
            self._cond.notify_all()
        for child in idle:
            child.stop()

    def _checkout(self) -> _Child:
        with self._cond:
            if self._pid != os.getpid():  # a forked child must not share the parent's pipes
                self._idle, self._count, self._pid = [], 0, os.getpid()
            while True:
                while self._idle:
                    child = self._idle.pop()
                    if child.alive:
                        return child
                    self._count -= 1
                    child.stop()
                if self._count < self.workers:
                    self._count += 1
                    break
                self._cond.wait()
        try:  # started outside the lock: importing sympy takes a while, the others keep being served
            return _Child(self._closed_gen)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _checkin(self, child: _Child) -> None:
        with self._cond:
            keep = child.alive and child.generation == self._closed_gen and self._pid == os.getpid()
            if keep:
                self._idle.append(child)
            else:
                self._count -= 1
            self._cond.notify()
        if not keep:
            child.stop()


_worker: MathWorker | None = None
_worker_lock = threading.Lock()


def math_worker() -> MathWorker:
    """The process-wide workers (stopped at interpreter exit)."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = MathWorker()
            atexit.register(_worker.close)
        return _worker


def shutdown_math_worker() -> None:
    """Stop the process-wide workers if they run (tests call this before counting processes)."""
    with _worker_lock:
        worker = _worker
    if worker is not None:
        worker.close()


if __name__ == "__main__":
    _serve(sys.stdin, sys.stdout)
