"""The helpers every program sandboxkit runs *inside* a sandbox shares (standard library only).

Who uses it: the kernel (:mod:`sandboxkit.kernel._kernel_main`), the fork server
(``backends/subprocess/_server_main.py``), the Docker runner (``backends/docker/_runner.py``) and the
isolated judge harness (``judge/_in_sandbox/isolated_head.py``); the host's own output cut
(:mod:`sandboxkit.output`) is this module's too, so a sandbox and the host cut a stream the same way.

Why a module that is never installed in a sandbox: those programs run under the sandbox's own
``python3``, which cannot import sandboxkit. Each imports what it needs from here as any module does
(so ruff and mypy read one definition, and the host's tests call the same code), and
:func:`sandboxkit._standalone.standalone_source` writes the imported definitions in place of that
import when the program is shipped. The text a sandbox runs stays one standalone program.

Rules for what lives here (the shipping relies on them): standard library only; a definition uses
only the module's imports and its other definitions; nothing runs at import; annotations are for
the type checker only (they are left out of the shipped text, which must compile on any Python 3
an image has); ``ctypes`` is never imported up front (its Python layer costs every process
~0.2 MB, copied by every fork, and ~1.5 ms to import).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every sandbox process memory
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PR_GET_DUMPABLE",
    "PR_SET_DUMPABLE",
    "HeadTail",
    "cut_head_tail",
    "cut_marker",
    "exit_code",
    "head_tail_split",
    "libc",
    "prctl",
    "read_exactly",
    "set_dumpable",
]

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
#: libc functions already looked up, by name: a forked child finds its parent's (no lookup after a fork).
_LIBC_FUNCTIONS: dict[str, Any] = {}


# ---------------------------------------------------------------------- libc


def libc(name: str) -> Any:
    """The libc function ``name``, returning a C ``int`` and called with ints and buffers; None where there is none.

    Through ``_ctypes`` alone where it can (see the module's rules); the ``ctypes`` package only where
    ``_ctypes`` cannot build it.
    """
    if name in _LIBC_FUNCTIONS:
        return _LIBC_FUNCTIONS[name]
    function: Any = None
    try:
        _ctypes: Any = __import__("_ctypes")

        class _Int(_ctypes._SimpleCData):  # type: ignore[misc]
            _type_ = "i"

        class _Function(_ctypes.CFuncPtr):  # type: ignore[misc]
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        function = _Function(_ctypes.dlsym(_ctypes.dlopen(None, 0), name))
    except Exception:
        try:
            import ctypes

            function = getattr(ctypes.CDLL(None), name)
        except Exception:
            function = None
    _LIBC_FUNCTIONS[name] = function
    return function


def prctl(option: int, value: int) -> int:
    """``prctl(option, value, 0, 0, 0)``: its result, or -1 where it failed or libc has none."""
    function = libc("prctl")
    if function is None:
        return -1
    try:
        return int(function(option, value, 0, 0, 0))
    except Exception:
        return -1


def set_dumpable(dumpable: bool) -> bool:
    """Make this process (non-)dumpable; True when it now is as asked.

    Why: a process of the same uid may ptrace a dumpable one, read its ``/proc/PID/mem`` and open its
    ``/proc/PID/fd``. A supervisor (kernel, fork server, runner, judge harness) turns itself
    non-dumpable before any program of the sandbox exists; a child about to become that program
    turns dumpable again (``exec`` would, and until then ``/proc/self`` must be its own).
    """
    value = 1 if dumpable else 0
    prctl(PR_SET_DUMPABLE, value)
    return prctl(PR_GET_DUMPABLE, 0) == value


# ---------------------------------------------------------------------- processes


def read_exactly(fd: int, size: int) -> bytes:
    """Exactly ``size`` bytes from ``fd``, never one more (what follows may be someone else's bytes).

    Raises:
        EOFError: the writer closed ``fd`` first.
    """
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError(f"end of file after {len(data)} of {size} bytes")
        data += chunk
    return data


def exit_code(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives: 0 for None, an int's low byte, else 1 with ``code`` on stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


# ---------------------------------------------------------------------- output: head and tail


def cut_marker(cut: int) -> bytes:
    """The text put where ``cut`` bytes were left out (one line, easy to spot and to grep)."""
    return b"\n[... sandboxkit: %d bytes cut ...]\n" % cut


def head_tail_split(cap: int, head_fraction: float) -> tuple[int, int]:
    """Bytes kept from the start and from the end of a stream longer than ``cap``."""
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
    head, tail = head_tail_split(cap, head_fraction)
    cut = len(data) - head - tail
    return data[:head] + cut_marker(cut) + (data[len(data) - tail :] if tail else b""), True


class HeadTail:
    """A stream accumulator that keeps the first ``head`` and the last ``tail`` bytes fed to it.

    Its :meth:`value` is :func:`cut_head_tail` of everything fed, whatever the chunking. The tail is
    trimmed in batches (when it holds twice what is kept), so a flood costs O(1) per byte rather
    than a copy of the tail per chunk; memory stays below ``cap`` + ``tail`` + one chunk.

    Args:
        cap: bytes kept in all (head + tail).
        head_fraction: share of ``cap`` kept from the start of the stream.
    """

    __slots__ = ("_head", "_head_cap", "_tail", "_tail_cap", "total")

    def __init__(self, cap: int, head_fraction: float = 0.5) -> None:
        if cap < 0:
            raise ValueError(f"cap must be >= 0, got {cap!r}")
        self._head_cap, self._tail_cap = head_tail_split(cap, head_fraction)
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
        if data and self._tail_cap:
            self._tail += data
            if len(self._tail) > 2 * self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def truncated(self) -> bool:
        """True once more bytes were fed than are kept."""
        return self.total > self._head_cap + self._tail_cap

    def value(self) -> bytes:
        """The kept bytes: the whole stream if it fit, else head + :func:`cut_marker` + tail."""
        tail = self._tail
        if len(tail) > self._tail_cap:  # trimmed in batches: what is kept is its end
            tail = tail[len(tail) - self._tail_cap :]
        if not self.truncated:
            return bytes(self._head + tail)
        return bytes(self._head) + cut_marker(self.total - len(self._head) - len(tail)) + bytes(tail)
