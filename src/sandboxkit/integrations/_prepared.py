"""N rollouts of one task from one prepared checkpoint (the adapters' ``fork_from_checkpoint`` key).

GRPO samples N trajectories per prompt, and each used to rebuild the task's starting state
(write the repository, run ``pip install``) in its own fresh sandbox. With
``fork_from_checkpoint`` an adapter prepares that state once per task (task files written,
``setup_command`` run), checkpoints it, and opens every trajectory of the task as a fork of
the checkpoint (copy-on-write on the subprocess backend).

The task is identified by what builds its state (files, setup command, limits), hashed, so two
trajectories of one prompt share a checkpoint and two prompts never do, without a dataset id.
Checkpoints live on the pool's loop, at most ``MAX_PREPARED`` per pool (the least recently used
is released past it; its forks keep working), and go with the pool.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections import OrderedDict
from collections.abc import Mapping

import anyio

from sandboxkit.checkpoint import Checkpoint
from sandboxkit.errors import InvalidRequest
from sandboxkit.models import Limits, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

__all__ = ["MAX_PREPARED", "fork_prepared", "task_key"]

#: Checkpoints kept per pool (one per task being trained on at once is the working set).
MAX_PREPARED = 64


def task_key(files: Mapping[str, bytes], setup_command: str | None, limits: Limits) -> str:
    """What identifies a task's starting state: its files, setup command and limits, hashed."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    digest.update(json.dumps([setup_command, limits.model_dump(mode="json")], sort_keys=True).encode())
    return digest.hexdigest()


class _Prepared:
    """The checkpoints of one pool, by task key, with one lock per key (each task is prepared once)."""

    def __init__(self) -> None:
        self.checkpoints: OrderedDict[str, Checkpoint] = OrderedDict()
        self.locks: dict[str, anyio.Lock] = {}


_registry: weakref.WeakKeyDictionary[SandboxPool, _Prepared] = weakref.WeakKeyDictionary()


async def _prepare(
    pool: SandboxPool, files: Mapping[str, bytes], setup_command: str | None, limits: Limits, timeout_s: float
) -> Checkpoint:
    async with pool.session(limits=limits) as session:
        if files:
            await session.write_files(files)
        if setup_command:
            result = await session.exec(setup_command, timeout_s=timeout_s)
            if result.status is not Status.OK:
                raise InvalidRequest(
                    f"setup_command {setup_command!r} failed ({result.status.value}, exit {result.exit_code}): "
                    f"{(result.stderr or result.stdout)[-500:]!r}; fix the command or the task's files",
                    backend=pool.backend.name,
                )
        return await session.checkpoint()


async def fork_prepared(
    pool: SandboxPool,
    files: Mapping[str, bytes],
    setup_command: str | None,
    limits: Limits,
    *,
    timeout_s: float,
) -> Session:
    """An opened session forked from the task's prepared checkpoint (prepared now if it is the first).

    Raises:
        InvalidRequest: the backend cannot fork, or ``setup_command`` failed.
        SandboxError: preparing or forking failed.
    """
    prepared = _registry.setdefault(pool, _Prepared())
    key = task_key(files, setup_command, limits)
    while True:
        lock = prepared.locks.setdefault(key, anyio.Lock())
        async with lock:  # only the preparation is serialised; forks of one task open concurrently
            checkpoint = prepared.checkpoints.get(key)
            if checkpoint is None or checkpoint.released:
                checkpoint = await _prepare(pool, files, setup_command, limits, timeout_s)
                prepared.checkpoints[key] = checkpoint
                while len(prepared.checkpoints) > MAX_PREPARED:
                    old_key, old = prepared.checkpoints.popitem(last=False)
                    prepared.locks.pop(old_key, None)
                    await old.release()  # forks already open keep working
            prepared.checkpoints.move_to_end(key)
        try:
            (session,) = await pool.fork(checkpoint, 1)
        except InvalidRequest:
            if checkpoint.released:
                continue  # evicted between the lock and the fork: prepare it again
            raise
        return session
