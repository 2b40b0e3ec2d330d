"""The wire between a pool and its host worker processes: batched pickle frames over a socket pair.

Both ends are sandboxkit's own code, in processes of the same user, so messages are pickled
tuples and models travel as pickles too (unpickling a pydantic model does not validate it
again: the data was validated once, where it entered the pool). Untrusted programs never
see this socket: they run inside sandboxes that the worker opens.

Every message sent during one turn of the event loop goes out in one write (one frame
holding a list), so a burst of runs, or of results, costs one system call and one
``pickle`` call on each side rather than one per run.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any, cast

__all__ = ["Link", "Message"]

#: A message: a tuple whose first item names it (see :mod:`sandboxkit._workers._set` for the list).
Message = tuple[Any, ...]

_HEADER = 4  # bytes of length before each frame


class Link(asyncio.Protocol):
    """One end of the socket pair, as an asyncio protocol.

    Args:
        on_messages: called with each received batch, in order, on the loop thread.
        on_lost: called once when the other end closed or died (``None``: it closed cleanly).
    """

    def __init__(
        self,
        on_messages: Callable[[list[Message]], None],
        on_lost: Callable[[BaseException | None], None],
        on_unsendable: Callable[[Message, Exception], None] | None = None,
    ) -> None:
        self._on_messages = on_messages
        self._on_lost = on_lost
        self._on_unsendable = on_unsendable
        self._transport: asyncio.Transport | None = None
        self._outbox: list[Message] = []
        self._flush_scheduled = False
        self._buffer = bytearray()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass, but is one

    def send(self, message: Message) -> None:
        """Queue ``message``; everything queued in this loop turn leaves in one frame."""
        if self.lost:
            return
        self._outbox.append(message)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._outbox = self._outbox, []
        if self.lost or self._transport is None or not batch:
            return
        try:
            frame = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            frame = self._sendable(batch)  # one message that cannot travel must not take the others along
        self._transport.write(len(frame).to_bytes(_HEADER, "little") + frame)

    def _sendable(self, batch: list[Message]) -> bytes:
        kept: list[Message] = []
        for message in batch:
            try:
                pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                if self._on_unsendable is not None:
                    self._on_unsendable(message, exc)  # it answers the message's call another way
                continue
            kept.append(message)
        return pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        end = len(buffer)
        batches: list[list[Message]] = []
        while end - start >= _HEADER:
            size = int.from_bytes(buffer[start : start + _HEADER], "little")
            if end - start - _HEADER < size:
                break
            batches.append(pickle.loads(memoryview(buffer)[start + _HEADER : start + _HEADER + size]))
            start += _HEADER + size
        if start:
            del buffer[:start]
        for batch in batches:
            self._on_messages(batch)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost:
            self.lost = True
            self._on_lost(exc)

    def close(self) -> None:
        """Send what is queued, then close the socket."""
        self._flush()
        if self._transport is not None:
            self._transport.close()
