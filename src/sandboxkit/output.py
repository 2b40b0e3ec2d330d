"""Keep both ends of a long output stream: the head and the tail, with the cut marked.

Why both ends: a program that prints a lot and then fails puts its traceback (and a final
answer) at the *end* of its output. Keeping only the first bytes hides exactly the part a
grader, a reward log or a model reading tool output needs. Every backend (and ``/run_code``)
cuts through this one helper so the text a model sees is the same whichever backend ran it.

The contract, per stream, with ``cap = Limits.output_bytes``:

* output of at most ``cap`` bytes is returned whole and not flagged;
* longer output keeps its first ``head = int(cap * Limits.output_head_fraction)`` bytes and its
  last ``cap - head`` bytes, joined by :func:`cut_marker` (which says how many bytes were cut),
  and the stream's ``*_truncated`` flag is set;
* the program keeps running past ``cap``; it is stopped (status ``output_limit``) only when a
  stream passes ``Limits.stop_bytes()`` (``output_stop_bytes``, default 64 MiB or ``cap`` if
  larger): a flood must not run until its timeout, a long log must not lose its end.
"""

from __future__ import annotations

__all__ = ["DEFAULT_STOP_BYTES", "HeadTail", "cut_head_tail", "cut_marker"]

#: A stream that passes this many bytes stops the program (unless ``Limits.output_stop_bytes`` says otherwise).
DEFAULT_STOP_BYTES = 64 << 20


def cut_marker(cut: int) -> bytes:
    """The text put where ``cut`` bytes were left out (one line, easy to spot and to grep)."""
    return b"\n[... sandboxkit: %d bytes cut ...]\n" % cut


def _split(cap: int, head_fraction: float) -> tuple[int, int]:
    head = max(0, min(cap, int(cap * head_fraction)))
    return head, cap - head


def cut_head_tail(data: bytes, cap: int, head_fraction: float = 0.5) -> tuple[bytes, bool]:
    """Cut ``data`` to its head and tail if it is longer than ``cap``.

    Returns:
        ``(text, truncated)``: ``data`` itself and ``False`` when it fits, else head + marker + tail
        and ``True``.
    """
    if len(data) <= cap:
        return data, False
    head, tail = _split(cap, head_fraction)
    cut = len(data) - head - tail
    return data[:head] + cut_marker(cut) + (data[len(data) - tail :] if tail else b""), True


class HeadTail:
    """A stream accumulator that keeps the first ``head`` and the last ``tail`` bytes fed to it.

    Memory is bounded by ``cap`` (plus one chunk while feeding), whatever the stream's length.

    Args:
        cap: bytes kept in all (head + tail).
        head_fraction: share of ``cap`` kept from the start of the stream.
    """

    __slots__ = ("_head", "_head_cap", "_tail", "_tail_cap", "total")

    def __init__(self, cap: int, head_fraction: float = 0.5) -> None:
        if cap < 0:
            raise ValueError(f"cap must be >= 0, got {cap!r}")
        self._head_cap, self._tail_cap = _split(cap, head_fraction)
        self._head = bytearray()
        self._tail = bytearray()
        #: Bytes fed so far (kept or not).
        self.total = 0

    def feed(self, data: bytes) -> None:
        """Add a chunk of the stream."""
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or not self._tail_cap:
            return
        self._tail += data
        extra = len(self._tail) - self._tail_cap
        if extra > 0:
            del self._tail[:extra]

    @property
    def truncated(self) -> bool:
        """True once more bytes were fed than are kept."""
        return self.total > self._head_cap + self._tail_cap

    def value(self) -> bytes:
        """The kept bytes: the whole stream if it fit, else head + :func:`cut_marker` + tail."""
        if not self.truncated:
            return bytes(self._head + self._tail)
        cut = self.total - len(self._head) - len(self._tail)
        return bytes(self._head) + cut_marker(cut) + bytes(self._tail)
