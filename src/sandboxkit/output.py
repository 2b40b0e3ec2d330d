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

Where the cut is made: the host cuts what it drains (:class:`HeadTail`), the kernel cuts inside the
sandbox with the same code (:mod:`sandboxkit._in_sandbox_std`, written into its text). The Docker
runners (Python and Go) and the cloud wrapper's bash keep only the head and tail bytes and the host
joins them with :func:`cut_marker`; tests pin each of them to :func:`cut_head_tail`.
"""

from __future__ import annotations

# One implementation, shared with the programs that run inside a sandbox (the kernel cuts a cell's
# output itself): there it is written into each program's text, here it is imported.
from sandboxkit._in_sandbox_std import HeadTail, cut_head_tail, cut_marker, head_tail_split

__all__ = ["DEFAULT_STOP_BYTES", "HeadTail", "cut_head_tail", "cut_marker", "head_tail_split"]

#: A stream that passes this many bytes stops the program (unless ``Limits.output_stop_bytes`` says otherwise).
DEFAULT_STOP_BYTES = 64 << 20
