"""The cloud half of the dead-man switch: the service's own expiry, renewed while the owner lives.

A SIGKILLed trainer runs no ``finally`` and no ``atexit``, and a cloud sandbox is not a process of
this machine that a local watchdog could remove. So each sandbox is created with the service's
own expiry set to the pool's dead-man TTL (:func:`sandboxkit._watchdog.ttl_for`): E2B's
``timeout`` (in seconds), Daytona's auto-stop interval (in whole minutes; the sandbox is
ephemeral, so a stop deletes it). While the owner lives, one daemon thread per backend object
renews every sandbox it holds, three times per TTL, whether or not calls are running; once the
owner is dead nobody renews, and the service removes the sandboxes one TTL after the last
renewal. Nobody needs to run ``cleanup``.

Why a thread with blocking HTTP calls rather than a task: the owner's event loops come and go
(the sync facade, Jupyter, Ray actors), and a renewal must not depend on any of them being
alive or idle enough to run it. The calls are the services' plain REST routes, the same ones
the SDKs call (E2B ``POST /sandboxes/{id}/timeout``, Daytona ``POST /sandbox/{id}/last-activity``).

Cost: one request per sandbox per third of the TTL (1,000 sandboxes with the default 40 s TTL:
about 75 requests a second, one at a time on this thread); a longer ``deadline_s`` on the pool,
or the backends' own lifetime options, make it fewer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = ["Renewer"]

log = logging.getLogger(__name__)


class Renewer:
    """Renews the service-side expiry of a backend's live sandboxes from a daemon thread.

    Args:
        live: the ids of the sandboxes the backend holds (read, never changed, here).
        renew: renews one sandbox with a blocking call through the given client (kept open between
            rounds, so a round reuses its connections); an exception is logged and retried next round.
        period_s: seconds between rounds (a third of the TTL).
        name: for the thread's name and the log.
    """

    def __init__(
        self,
        live: Collection[str],
        renew: Callable[[httpx.Client, str], None],
        period_s: Callable[[], float],
        name: str,
    ) -> None:
        self._live = live
        self._renew = renew
        self._period_s = period_s
        self._name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def ensure_running(self) -> None:
        """Start the thread unless it runs; called after each sandbox is created."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"sandboxkit-renew-{self._name}", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        """Renew every held sandbox each period; end once the backend holds none."""
        import httpx  # imported here: the SDKs import it anyway, and `import sandboxkit` stays light

        with httpx.Client(timeout=5.0) as client:
            while True:
                time.sleep(max(0.2, self._period_s()))
                with self._lock:
                    try:
                        # The owner's loop adds and removes ids without this lock; under the GIL the copy is
                        # one C call, but a copy racing a resize (free-threaded builds) must not end renewals.
                        ids = list(self._live)
                    except RuntimeError:
                        continue
                    if not ids:
                        self._thread = None  # the next creation starts a new one
                        return
                for sandbox_id in ids:
                    try:
                        self._renew(client, sandbox_id)
                    except Exception as exc:
                        log.debug("renewing %s sandbox %s failed: %s", self._name, sandbox_id, type(exc).__name__)
