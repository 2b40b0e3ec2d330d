"""A coroutine run up to its first wait, so that a timeout is set up only for one that waits (issue 30).

A pooled run ends with the sandbox's ``reset()`` under a timeout (a reset that hangs must not hold the
pool). The subprocess backend's reset never waits: it reads the server's report if it is there and wipes
the workspace synchronously. The timeout scope around it (anyio's ``move_on_after``: the task looked up,
a timer pushed on the loop's heap and cancelled) was several microseconds of the host's CPU per run for
a timeout that cannot fire. :class:`Started` steps the coroutine once by hand: if it returned, that is
its result; if it waits, awaiting the :class:`Started` runs the rest exactly as ``await`` would have,
under whatever timeout the caller sets up then.

Only for a coroutine that holds no anyio cancel scope open across its first wait: such a scope would
have been entered before the caller's timeout scope and left after it, the wrong way round (anyio
raises ``RuntimeError``). Docker's reset enters one at once, so the pool steps only sandboxes that say
their reset is safe (``reset_steps_inline``).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Started"]

T = TypeVar("T")


class Started(Generic[T]):
    """``coro`` stepped to its first wait: ``done`` and ``result`` if it finished, else await the rest.

    Raises (from the constructor): whatever the coroutine raised before its first wait.
    """

    __slots__ = ("_coro", "_waits_on", "done", "result")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self.result: T | None = None
        try:
            self._waits_on: Any = coro.send(None)
        except StopIteration as stop:
            self.done = True
            self.result = stop.value
        else:
            self.done = False

    def __await__(self) -> Generator[Any, Any, T]:
        """The rest of the coroutine, as ``yield from`` would run it: what the loop sends or throws in
        (a result, a cancellation) reaches the coroutine, and what it waits on reaches the loop."""
        if self.done:
            return self.result  # type: ignore[return-value]  # set from the coroutine's return
        coro, waits_on = self._coro, self._waits_on
        while True:
            try:
                sent = yield waits_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation or a timeout thrown in by the loop
                try:
                    waits_on = coro.throw(exc)
                except StopIteration as stop:
                    self.done, self.result = True, stop.value
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    waits_on = coro.send(sent)
                except StopIteration as stop:
                    self.done, self.result = True, stop.value
                    return stop.value  # type: ignore[no-any-return]
