"""SIGTERM as a clean shutdown, shared by the async pool and its blocking twin.

SIGTERM's default action kills the process without unwinding: no ``async with`` exit, no
atexit hook, so every sandbox the process opened would be left behind. Turning it into
``SystemExit`` (as Python already does for SIGINT with ``KeyboardInterrupt``) runs both.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["install_sigterm_to_exit"]


def install_sigterm_to_exit() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` if nobody else handles it; a no-op outside the main thread.

    A handler the application installed itself is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _sigterm_to_exit)
    except (ValueError, OSError):  # not allowed here (embedded interpreter): the atexit hooks still run
        pass


def _sigterm_to_exit(signum: int, frame: object) -> None:
    # Unwinding with SystemExit runs `async with` exits and atexit hooks; SIG_DFL would not.
    raise SystemExit(128 + signum)
