"""``sandboxkit._workers``: how many host workers a pool gets, and the wire between them (no sandbox needed)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sandboxkit import InvalidRequest, PoolClosed, SandboxPool, backend
from sandboxkit._workers._spec import ENV, Recipe, recipe_of, resolve_processes
from sandboxkit._workers._wire import Link, Message
from sandboxkit.testing import FakeBackend

RECIPE = Recipe("subprocess")


def test_one_process_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert resolve_processes(None, max_concurrency=64, recipe=RECIPE, name="x") == 1
    assert resolve_processes(3, max_concurrency=64, recipe=RECIPE, name="x") == 3
    monkeypatch.setenv(ENV, "2")
    assert resolve_processes(None, max_concurrency=64, recipe=RECIPE, name="x") == 2
    assert resolve_processes(1, max_concurrency=64, recipe=RECIPE, name="x") == 1  # the argument wins


@pytest.mark.parametrize(
    ("cores", "max_concurrency", "expected"),
    [(1, 64, 1), (2, 64, 1), (4, 64, 3), (16, 64, 15), (16, 8, 2), (16, 3, 1), (192, 1024, 16)],
)
def test_auto_leaves_a_core_gives_each_worker_four_calls_and_stops_at_sixteen(
    monkeypatch: pytest.MonkeyPatch, cores: int, max_concurrency: int, expected: int
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert resolve_processes("auto", max_concurrency=max_concurrency, recipe=RECIPE, name="x") == expected


@pytest.mark.parametrize("bad", [0, -1, "many", 2.5, True])
def test_a_bad_count_is_an_invalid_request(bad: object) -> None:
    with pytest.raises(InvalidRequest, match="processes must be a positive integer or 'auto'"):
        resolve_processes(bad, max_concurrency=8, recipe=RECIPE, name="x")  # type: ignore[arg-type]


def test_a_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "lots")
    with pytest.raises(InvalidRequest, match=ENV):
        SandboxPool("subprocess")


def test_a_backend_object_needs_a_recipe_for_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidRequest, match="pass its name or config"):
        SandboxPool(FakeBackend(), processes=2)
    monkeypatch.setenv(ENV, "2")  # the switch applies where it can and leaves other pools in one process
    assert SandboxPool(FakeBackend())._workers is None
    made = backend("subprocess", warm_python=False)
    recipe = recipe_of(made)  # the registry recorded how it was built: its validated config
    assert recipe is not None and getattr(recipe.backend, "warm_python", None) is False
    pool = SandboxPool(made)
    assert pool._workers is not None and pool._workers.processes == 2


async def test_everything_sent_in_one_loop_turn_leaves_in_one_frame() -> None:
    loop = asyncio.get_running_loop()
    received: list[list[Message]] = []
    left, right = socket.socketpair()
    sender = Link(lambda batch: None, lambda exc: None)
    receiver = Link(received.append, lambda exc: None)
    await loop.create_unix_connection(lambda: sender, sock=left)
    await loop.create_unix_connection(lambda: receiver, sock=right)
    for i in range(3):
        sender.send(("run", i, {"code": "print(1)" * 10_000}))  # large enough to arrive in pieces
    await asyncio.sleep(0.05)
    sender.send(("cancel", 0))
    await asyncio.sleep(0.05)
    assert [[m[:2] for m in batch] for batch in received] == [[("run", 0), ("run", 1), ("run", 2)], [("cancel", 0)]]
    sender.close()
    receiver.close()


def test_ci_runs_a_subset_with_two_workers_per_pool() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert "bash scripts/multiprocess-subset.sh" in (root / ".ci" / "run").read_text().splitlines()
    script = (root / "scripts" / "multiprocess-subset.sh").read_text()
    assert f"{ENV}=2" in script
    subset = script.split("SUBSET=(", 1)[1].split(")", 1)[0].split()
    assert subset and all((root / path).exists() for path in subset), subset


async def test_a_message_that_cannot_be_pickled_does_not_take_its_batch_along() -> None:
    loop = asyncio.get_running_loop()
    received: list[list[Message]] = []
    refused: list[Message] = []
    left, right = socket.socketpair()
    sender = Link(lambda batch: None, lambda exc: None, lambda message, exc: refused.append(message))
    receiver = Link(received.append, lambda exc: None)
    await loop.create_unix_connection(lambda: sender, sock=left)
    await loop.create_unix_connection(lambda: receiver, sock=right)
    sender.send(("run", 0, "fine"))
    sender.send(("exec", 1, lambda: None))  # a lambda cannot be pickled
    sender.send(("run", 2, "fine too"))
    await asyncio.sleep(0.05)
    assert [[m[:2] for m in batch] for batch in received] == [[("run", 0), ("run", 2)]]
    assert [m[:2] for m in refused] == [("exec", 1)]
    sender.close()
    receiver.close()


async def test_a_closing_worker_set_names_the_public_class_to_make_anew() -> None:
    pool = SandboxPool("subprocess", processes=2)  # not started: no worker process is spawned
    assert pool._workers is not None
    pool._workers.closing = True
    with pytest.raises(PoolClosed, match="create a new SandboxPool"):
        await pool._workers._pick()
    await pool.aclose()
