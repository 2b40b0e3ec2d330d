"""``sandboxkit bench agent``: an RL-shaped agent workload per backend, with and without suspend and fork.

One **GRPO group** is G rollouts of one task, run concurrently. Each rollout is a trajectory of N
turns: the model thinks (a sleep of ``think_s``), then makes a tool call (a shell command and a
kernel cell). The task is prepared first: a setup step spends CPU and leaves files (as an install
would). Each rollout's kernel keeps a watcher thread that wakes every 10 ms and spends
``idle_load`` of a core (a dev server, a file watcher), so a sandbox left running while the model
thinks costs CPU. At the end each rollout is **verified**: every turn's line in ``log.txt`` in
order, every turn in the kernel's ``calls``, the watcher alive, the prepared files present.

The same group runs in these ways, one after the other:

* ``fork + suspend``: prepare one session, ``pool.fork`` it into G, ``Session.suspend()`` before
  each think and ``resume()`` after it (timed: the row's resume p50);
* ``fork + idle suspend`` (subprocess only): ``SandboxPool(suspend_idle_s=think_s / 2)``, no explicit calls;
* ``fork, no suspend`` and ``no fork + suspend`` (every rollout prepares its own session);
* ``no fork, no suspend``: the baseline; every other row's ratio is its sandbox CPU over the row's.

Each row gives, per trajectory: the sandboxes' CPU-seconds, the host process's CPU-seconds, the
memory the sandboxes held (mean of samples every 50 ms) and the group's wall time (see
``_agent_meters`` for how each is read); the row's median / p99 are the rollouts' wall times.

Then the **suspended fleet**: F sessions (64 on subprocess, 8 on Docker), each with a kernel whose
thread wakes every 10 ms, measured over a window running (the control: the meter sees CPU) and
suspended (target: 0 ticks), then resumed one by one (resume p50: <= 20 ms on subprocess,
<= 300 ms on Docker) and checked (the kernel's variables and thread survived).

Docker runs when an engine and the image are there. Knobs (environment, ``SANDBOXKIT_BENCH_AGENT_``
+ name): ``TURNS`` (N, 4), ``GROUP`` (G, 4), ``THINK_S`` (0.4), ``SETUP_HASHES`` (the setup's CPU:
SHA-256 rounds, 1,000,000), ``IDLE_LOAD`` (0.25), ``FLEET`` (64), ``DOCKER_FLEET`` (8),
``WINDOW_S`` (1.0), ``BACKENDS`` (``subprocess,docker``). ``--quick`` halves turns, group, think
time and window.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))

import _agent_meters as meters
from sandboxkit import SandboxPool
from sandboxkit.benchmarking import Row, row_from_samples
from sandboxkit.errors import SandboxkitError
from sandboxkit.session import Session

BENCH = "agent"

# The setup step: CPU-bound work that leaves files (what ``pip install`` does to a task's sandbox).
_SETUP = """
import hashlib, os
os.makedirs('deps', exist_ok=True)
h, files = b'', 50
for i in range(files):
    for _ in range({hashes} // files):
        h = hashlib.sha256(h).digest()
    with open(f'deps/m{{i}}.py', 'w') as f:
        f.write(f'X = {{h.hex()!r}}\\n')
open('deps/ready', 'w').write(h.hex())
"""

# The kernel's state: the turns it saw, and a watcher thread that wakes every 10 ms and spends
# ``busy_s`` of CPU time (not wall time: the same CPU on a loaded host) (a dev server, a file watcher, a notebook's own thread), so a sandbox
# left running while the model thinks costs CPU.
_KERNEL = """
import os, threading, time
calls, ticks = [], [0]
def _watch():
    while True:
        until = time.thread_time() + {busy_s}
        while time.thread_time() < until:
            pass
        os.listdir('.')
        ticks[0] += 1
        time.sleep(0.01)
watcher = threading.Thread(target=_watch, daemon=True)
watcher.start()
"""


@dataclass(frozen=True)
class Shape:
    """One GRPO group's workload. ``broken_turn``: that turn's command writes a wrong line (tests)."""

    turns: int = 4
    group: int = 4
    think_s: float = 0.4
    setup_hashes: int = 1_000_000
    idle_load: float = 0.25  # the share of a core each rollout's watcher spends while the model thinks
    broken_turn: int | None = None


@dataclass(frozen=True)
class Variant:
    """How the group runs: forked from one prepared session or not, and how it suspends between turns."""

    fork: bool
    suspend: str  # "explicit" (Session.suspend/resume), "idle" (the pool's suspend_idle_s) or "none"

    @property
    def label(self) -> str:
        how = {"explicit": " + suspend", "idle": " + idle suspend", "none": ", no suspend"}[self.suspend]
        return ("fork" if self.fork else "no fork") + how


VARIANTS = (
    Variant(fork=True, suspend="explicit"),
    Variant(fork=True, suspend="idle"),
    Variant(fork=True, suspend="none"),
    Variant(fork=False, suspend="explicit"),
    Variant(fork=False, suspend="none"),
)
BASELINE = Variant(fork=False, suspend="none")


@dataclass
class Group:
    """What one group's run measured."""

    wall_s: float
    rollout_s: list[float]
    verified: int
    sandbox_cpu_s: float | None
    host_cpu_s: float
    memory_bytes: list[int]
    resume_s: list[float] = field(default_factory=list)
    suspended_turns: int = 0
    cpu_source: str = ""
    errors: list[str] = field(default_factory=list)


def _sandbox(session: Session) -> Any:
    """The session's current sandbox (private: a benchmark reads its cgroup, which no public API exposes)."""
    entry = session._entry
    return entry.sandbox if entry is not None else None


class _Usage:
    """Sandbox CPU of the sessions a group closed, and memory samples of those it holds."""

    def __init__(self) -> None:
        self.closed_cpu_s: float | None = 0.0
        self.memory: list[int] = []

    def before_close(self, session: Session) -> None:
        cpu = meters.sandbox_cpu_s(_sandbox(session))
        self.closed_cpu_s = None if cpu is None or self.closed_cpu_s is None else self.closed_cpu_s + cpu

    async def sample(self, sessions: Sequence[Session], every_s: float = 0.05) -> None:
        """Record the memory the sessions' sandboxes hold, until cancelled."""
        while True:
            held = [meters.sandbox_memory_bytes(_sandbox(s)) for s in sessions]
            if all(h is not None for h in held):
                self.memory.append(sum(h for h in held if h is not None))
            await anyio.sleep(every_s)


class SetupFailed(Exception):
    """The task's setup step did not finish (it ran out of time on a loaded host, say)."""


async def _prepare(session: Session, shape: Shape) -> None:
    done = await session.exec(["python3", "-c", _SETUP.format(hashes=shape.setup_hashes)], timeout_s=300)
    if done.exit_code != 0:
        raise SetupFailed(f"the setup step failed: {done.status}, exit {done.exit_code}, {done.stderr[-300:]!r}")


async def _think(session: Session, shape: Shape, variant: Variant, resumes: list[float]) -> bool:
    """The model's think time between turns; True when the session was suspended through it."""
    if variant.suspend == "explicit":
        suspended = await session.suspend()
        await anyio.sleep(shape.think_s)
        started = time.perf_counter()
        await session.resume()
        resumes.append(time.perf_counter() - started)
        return suspended
    await anyio.sleep(shape.think_s)
    return session.suspended  # the pool's idle timer suspended it (the next call resumes it)


async def _verify(session: Session, shape: Shape) -> bool:
    files = await session.read_files(["log.txt", "deps/ready"])
    cell = await session.python("print(calls, watcher.is_alive(), ticks[0] > 0)")
    turns = list(range(1, shape.turns + 1))
    return (
        files.get("log.txt", b"").decode().split() == [str(t) for t in turns]
        and "deps/ready" in files
        and not cell.state_lost
        and cell.stdout.strip() == f"{turns} True True"
    )


async def _rollout(session: Session, shape: Shape, variant: Variant, out: Group) -> None:
    """One trajectory; an error ends it unverified, with its text in the row (a benchmark reports, never hides)."""
    started = time.perf_counter()
    try:
        await session.python(_KERNEL.format(busy_s=shape.idle_load * 0.01))
        for turn in range(1, shape.turns + 1):
            suspended = await _think(session, shape, variant, out.resume_s)
            out.suspended_turns += suspended  # after the await: rollouts run concurrently
            line = "wrong" if turn == shape.broken_turn else str(turn)
            await session.exec(f"echo {line} >> log.txt")
            await session.python(f"calls.append({turn})")
        verified = await _verify(session, shape)
    except SandboxkitError as exc:
        out.errors.append(f"{type(exc).__name__}: {exc}")
        verified = False
    out.verified += verified
    out.rollout_s.append(time.perf_counter() - started)


async def _open_group(pool: SandboxPool, shape: Shape, variant: Variant, usage: _Usage) -> list[Session]:
    if variant.fork:
        async with pool.session() as prepared:
            await _prepare(prepared, shape)
            sessions = await pool.fork(prepared, shape.group)
            usage.before_close(prepared)
        return sessions
    sessions = [pool.session() for _ in range(shape.group)]
    errors: list[Exception] = []

    async def prepare(session: Session) -> None:
        try:
            await _prepare(session, shape)
        except (SandboxkitError, SetupFailed) as exc:  # the first is raised once all have ended
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for s in sessions:
            tg.start_soon(prepare, s)
    if errors:
        for s in sessions:
            await s.close()
        raise errors[0]
    return sessions


async def run_group(
    backend: str, shape: Shape, variant: Variant, backend_options: dict[str, Any] | None = None
) -> Group:
    """Prepare, (fork,) run and verify one GRPO group; measure its CPU, memory and wall time."""
    tree = meters.TreeCpu()
    host0, tree0 = meters.host_cpu_s(), tree.total_s()
    started = time.perf_counter()
    usage = _Usage()
    out = Group(0.0, [], 0, None, 0.0, [])
    # Well above the gap between one turn's two calls, or it would suspend (and resume) inside a turn.
    idle_s = shape.think_s / 2 if variant.suspend == "idle" else None
    try:
        async with SandboxPool(
            backend,
            max_concurrency=shape.group + 1,
            suspend_idle_s=idle_s,
            backend_options=backend_options,
            handle_signals=False,
        ) as pool:
            try:
                sessions = await _open_group(pool, shape, variant, usage)
            except (SandboxkitError, SetupFailed) as exc:  # reported in the row, as a rollout's error is
                out.errors.append(f"preparing the group: {type(exc).__name__}: {exc}")
                sessions = []
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(usage.sample, sessions)
                    async with anyio.create_task_group() as rollouts:
                        for s in sessions:
                            rollouts.start_soon(_rollout, s, shape, variant, out)
                    tg.cancel_scope.cancel()
            finally:
                for s in sessions:
                    usage.before_close(s)
                    await s.close()
        out.wall_s = time.perf_counter() - started
        out.host_cpu_s = meters.host_cpu_s() - host0
        tree1 = tree.total_s()
        if usage.closed_cpu_s is not None:
            out.sandbox_cpu_s, out.cpu_source = usage.closed_cpu_s, "the sandboxes' cgroups"
        elif tree0 is not None and tree1 is not None:
            out.sandbox_cpu_s = max(0.0, tree1 - tree0 - out.host_cpu_s)
            out.cpu_source = "cpuacct of the host's process tree, less the host"
        out.memory_bytes = usage.memory
    finally:
        tree.close()
    return out


def _per(value: float | None, n: int) -> float | None:
    return None if value is None else value / n


def _details(extra: dict[str, Any]) -> str:
    def num(key: str, fmt: str) -> str:
        value = extra.get(key)
        return "n/a" if value is None else format(value, fmt)

    text = (
        f"sandbox CPU {num('sandbox_cpu_s_per_traj', '.3f')} s/traj, host CPU {num('host_cpu_s_per_traj', '.3f')} "
        f"s/traj, memory {num('memory_mib_per_traj', '.1f')} MiB/traj, group wall {extra['wall_s']:.2f} s, "
        f"verified {extra['verified']}/{extra['rollouts']}"
    )
    if extra.get("resume_p50_ms") is not None:
        text += f", resume p50 {extra['resume_p50_ms']:.2f} ms"
    if extra.get("suspended_turns"):
        text += f", suspended {extra['suspended_turns']}/{extra['turns']} thinks"
    if extra.get("errors"):
        text += f", {len(extra['errors'])} rollout(s) failed, first: {extra['errors'][0][:200]}"
    return text


def group_row(backend: str, shape: Shape, variant: Variant, group: Group) -> Row:
    """The row of one group: per-trajectory figures in ``extra`` (and in words in ``extra['details']``)."""
    g = shape.group
    memory = statistics.mean(group.memory_bytes) / g / 2**20 if group.memory_bytes else None
    extra: dict[str, Any] = {
        "sandbox_cpu_s_per_traj": _per(group.sandbox_cpu_s, g),
        "host_cpu_s_per_traj": group.host_cpu_s / g,
        "memory_mib_per_traj": memory,
        "memory_peak_mib_per_traj": max(group.memory_bytes) / g / 2**20 if group.memory_bytes else None,
        "wall_s": group.wall_s,
        "verified": group.verified,
        "rollouts": g,
        "turns": shape.turns * g,
        "suspended_turns": group.suspended_turns,
        "resume_p50_ms": statistics.median(group.resume_s) * 1000 if group.resume_s else None,
        "cpu_source": group.cpu_source or "not measurable on this host",
        "errors": group.errors,
        "load1": os.getloadavg()[0],
    }
    extra["details"] = _details(extra)
    row = row_from_samples(
        BENCH,
        f"{backend}: {variant.label}",
        group.rollout_s,
        target="every rollout verifies",
        met=group.verified == g,
        extra=extra,
    )
    if variant != BASELINE:
        row.baseline = f"{backend}: {BASELINE.label}"
    return row


def _with_ratios(rows: list[Row]) -> list[Row]:
    """Each row's ratio: the baseline's sandbox CPU per trajectory over its own (how many times less)."""
    by_case = {r.case: r for r in rows}
    for row in rows:
        base = by_case.get(row.baseline or "")
        ours = row.extra["sandbox_cpu_s_per_traj"]
        theirs = base.extra["sandbox_cpu_s_per_traj"] if base is not None else None
        if ours and theirs:
            row.ratio = theirs / ours
    return rows


async def trajectory_rows(backend: str, shape: Shape, variants: Sequence[Variant] = VARIANTS) -> list[Row]:
    """One row per variant, run one after the other."""
    rows = [group_row(backend, shape, v, await run_group(backend, shape, v)) for v in variants]
    return _with_ratios(rows)


def _cpu_now(sandbox: Any) -> float | None:
    """The sandbox's CPU-seconds so far: its processes' clock ticks (subprocess), else its cgroup's usage."""
    ticks: int | None = meters.sandbox_ticks(sandbox)
    cpu_s: float | None = meters.sandbox_cpu_s(sandbox) if ticks is None else ticks / os.sysconf("SC_CLK_TCK")
    return cpu_s


async def _window_cpu(sandboxes: Sequence[Any], window_s: float) -> list[float] | None:
    """CPU-seconds each sandbox used over ``window_s`` (None: this host cannot tell)."""
    before = [_cpu_now(s) for s in sandboxes]
    await anyio.sleep(window_s)
    after = [_cpu_now(s) for s in sandboxes]
    spent = [a - b for a, b in zip(after, before, strict=True) if a is not None and b is not None]
    return spent if len(spent) == len(sandboxes) else None


async def _each(sessions: Sequence[Session], call: Callable[[Session], Awaitable[Any]]) -> list[Any]:
    results: list[Any] = [None] * len(sessions)

    async def one(i: int) -> None:
        results[i] = await call(sessions[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(sessions)):
            tg.start_soon(one, i)
    return results


#: The fleet's watchers: 0.05 ms busy per 10 ms wake (0.5 % of a core each), enough for the control to show.
_FLEET_KERNEL = _KERNEL.format(busy_s=0.00005)


def _window_row(backend: str, label: str, spent: list[float], window_s: float, extra: dict[str, Any]) -> Row:
    n = len(spent)
    ticks = round(sum(spent) * os.sysconf("SC_CLK_TCK"))
    extra = {**extra, "cpu_s_total": sum(spent), "ticks_total": ticks}
    extra["details"] = f"{ticks} ticks ({sum(spent) * 1000:.0f} ms) over {window_s:g} s in all {n} sessions" + (
        extra.pop("more", "")
    )
    return row_from_samples(BENCH, f"{backend}: {n} sessions {label}, CPU over {window_s:g} s", spent, extra=extra)


async def _resume_each(sessions: Sequence[Session]) -> tuple[list[float], list[float], list[Any]]:
    """Resume each session in turn, then run one cell in it: the resume's and the cell's durations, the cells."""
    resumes, firsts, cells = [], [], []
    for s in sessions:
        started = time.perf_counter()
        await s.resume()
        resumed = time.perf_counter()
        cells.append(await s.python("print(ticks[0] > 0, watcher.is_alive())"))
        resumes.append(resumed - started)
        firsts.append(time.perf_counter() - resumed)
    return resumes, firsts, cells


async def fleet_rows(backend: str, n: int, window_s: float, resume_target_ms: float) -> list[Row]:
    """N suspended sessions: their CPU over a window (and running, as the control), resume p50, and state kept.

    The window rows' median and p99 are CPU-milliseconds per session over the window; the resume
    row's are ``Session.resume()``'s, with the first cell after it (and the same cell on a running
    session, the control) in ``extra``.
    """
    async with SandboxPool(backend, max_concurrency=n, handle_signals=False) as pool:
        sessions = [pool.session() for _ in range(n)]
        try:
            await _each(sessions, lambda s: s.python(_FLEET_KERNEL))
            sandboxes = [_sandbox(s) for s in sessions]
            running = await _window_cpu(sandboxes, window_s)
            suspended = sum(await _each(sessions, lambda s: s.suspend()))
            memory = [meters.sandbox_memory_bytes(s) for s in sandboxes]
            frozen = await _window_cpu(sandboxes, window_s)
            resumes, after_resume, cells = await _resume_each(sessions)
            _, on_running, _ = await _resume_each(sessions)  # the control: the same cell, nothing to resume
        finally:
            await _each(sessions, lambda s: s.close())
    kept = sum(c.stdout.strip() == "True True" and not c.state_lost for c in cells)
    held = sum(m for m in memory if m is not None) / 2**20 if all(m is not None for m in memory) else None
    common: dict[str, Any] = {"sessions": n, "window_s": window_s, "load1": os.getloadavg()[0]}
    rows = []
    if running is not None and frozen is not None:
        rows.append(_window_row(backend, "running (control)", running, window_s, common))
        more = f"; {suspended}/{n} suspended, holding {held or 0:.0f} MiB"
        frozen_row = _window_row(
            backend,
            "suspended",
            frozen,
            window_s,
            {**common, "suspended_ok": suspended, "memory_held_mib": held, "more": more},
        )
        frozen_row.target = "0 ticks"
        frozen_row.met = frozen_row.extra["ticks_total"] == 0 and suspended == n
        rows.append(frozen_row)
    resume = row_from_samples(
        BENCH,
        f"{backend}: resume of {n} suspended sessions",
        resumes,
        target=f"p50 <= {resume_target_ms:g} ms, state kept",
        extra={
            **common,
            "state_kept": kept,
            "first_cell_after_resume_p50_ms": statistics.median(after_resume) * 1000,
            "same_cell_running_p50_ms": statistics.median(on_running) * 1000,
        },
    )
    resume.extra["details"] = (
        f"kernel variable and thread kept in {kept}/{n}; the first cell after resume p50 "
        f"{resume.extra['first_cell_after_resume_p50_ms']:.1f} ms (on a running session "
        f"{resume.extra['same_cell_running_p50_ms']:.1f} ms)"
    )
    resume.met = resume.median_ms <= resume_target_ms and kept == n
    rows.append(resume)
    return rows


def _docker_missing() -> str | None:
    """Why the Docker rows cannot run here (None: they can)."""
    try:
        from sandboxkit.backends.docker import DockerBackend
    except ImportError as exc:
        return str(exc)
    availability = DockerBackend.availability()
    return None if availability.usable else availability.reason


def _knob(name: str, default: float) -> float:
    return float(os.environ.get(f"SANDBOXKIT_BENCH_AGENT_{name}", default))


def settings(quick: bool) -> tuple[Shape, int, int, float, list[str]]:
    """The run's shape, fleet sizes (subprocess, Docker), window and backends, from the knobs."""
    scale = 0.5 if quick else 1.0
    shape = Shape(
        turns=max(1, int(_knob("TURNS", 4 * scale))),
        group=max(1, int(_knob("GROUP", 4 * scale))),
        think_s=_knob("THINK_S", 0.4 * scale),
        setup_hashes=int(_knob("SETUP_HASHES", 1_000_000)),
        idle_load=_knob("IDLE_LOAD", 0.25),
    )
    backends = os.environ.get("SANDBOXKIT_BENCH_AGENT_BACKENDS", "subprocess,docker").split(",")
    return shape, int(_knob("FLEET", 64)), int(_knob("DOCKER_FLEET", 8)), _knob("WINDOW_S", 1.0 * scale), backends


def _variants(backend: str) -> list[Variant]:
    """Every variant on subprocess; on the slower Docker, the full one and the baseline unless ``VARIANTS=all``."""
    if backend == "subprocess" or os.environ.get("SANDBOXKIT_BENCH_AGENT_VARIANTS") == "all":
        return list(VARIANTS)
    return [VARIANTS[0], BASELINE]


def run(quick: bool = False) -> list[Row]:
    shape, fleet, docker_fleet, window_s, backends = settings(quick)
    if "docker" in backends and (why := _docker_missing()) is not None:
        print(f"bench agent: docker rows skipped: {why}", file=sys.stderr)
        backends = [b for b in backends if b != "docker"]

    async def main() -> list[Row]:
        rows: list[Row] = []
        for backend in backends:
            rows += await trajectory_rows(backend, shape, _variants(backend))
            size, target_ms = (fleet, 20) if backend == "subprocess" else (docker_fleet, 300)
            rows += await fleet_rows(backend, size, window_s, resume_target_ms=target_ms)
        return rows

    return anyio.run(main)
