"""Exactly-once commands on a cloud sandbox: a command id, a done-marker and saved output.

A cloud service answers a command over a network connection. When that connection drops
after the request left (a reset, a proxy timeout, a lost answer), the client cannot know
whether the command ran: sending it again may run ``echo x >> log`` twice, and not sending
it loses the exit code. So every command the cloud sandboxes run is wrapped by
:func:`once_script` under its id, and a dropped call is answered by sending the *same* script
again (see :meth:`~sandboxkit.backends._cloud_sandbox.CloudSandbox._step`):

* the first copy to arrive claims the id with ``mkdir <id>.once`` (atomic: exactly one copy
  wins, however many arrive), runs the command with its streams saved in that directory, and
  writes its exit code to ``rc`` with a rename, so ``rc`` (the done-marker) only ever exists
  complete;
* every copy, the first included, waits for ``rc`` and answers with the saved streams and that
  exit code. A copy that arrives while the first still runs waits for it; one that arrives
  after it finished reads the result back.

The command therefore runs once whether the lost request reached the service or not, and
its exit code and output are recovered on the retry. The saved streams are the wrapper's
frame (already capped by :mod:`sandboxkit.backends._wrapper`), and the previous command's
streams are removed by the next command, keeping its done-marker, so a session's control
directory does not grow with its output. ``reset`` empties the control directory.

Where this cannot hold: Sandbox Fusion's ``/run_code`` is stateless (every call runs in a
fresh sandbox and nothing of it stays to read back), so a retried call there runs the program
again; the pool retries such calls only because a run's files die with its sandbox.
"""

from __future__ import annotations

import re
import shlex

from sandboxkit.backends._wrapper import CONTROL_DIR

__all__ = ["ONCE_SUFFIX", "once_script"]

#: Suffix of the directory holding one command's claim, saved streams and done-marker.
ONCE_SUFFIX = ".once"
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def once_script(command: str, command_id: str, *, root: str = "", wait_s: float, previous: str | None = None) -> str:
    """The command line that runs ``command`` at most once under ``command_id`` and replays its result.

    Args:
        command: the shell command line to guard (the wrapper's ``bash -c '...'``).
        command_id: unique per command, the same on every resend of it.
        root: directory holding the control directory ("" = the starting directory).
        wait_s: how long a copy waits for the done-marker before giving up (exit 124, no frame):
            bounds a resend whose first copy was killed before it could finish.
        previous: id of the previous command in this sandbox, whose saved streams are removed.

    Raises:
        ValueError: an id that is not a plain token (it becomes a file name).
    """
    for value in (command_id, previous):
        if value is not None and not _ID.match(value):
            raise ValueError(f"command id {value!r} must be 1-64 letters, digits, '-' or '_'")
    q = shlex.quote
    d = f'"$C"/{command_id}{ONCE_SUFFIX}'
    ticks = max(1, int(wait_s * 20))
    lines = [
        (f"cd -- {q(root)} || exit 125" if root else ":"),
        f'C={CONTROL_DIR}; mkdir -p "$C" || exit 125',
        (f'rm -f "$C"/{previous}{ONCE_SUFFIX}/out "$C"/{previous}{ONCE_SUFFIX}/err' if previous else ":"),
        f"if mkdir {d} 2>/dev/null; then",
        f"  {command} >{d}/out 2>{d}/err; echo $? >{d}/rc.tmp && mv -f {d}/rc.tmp {d}/rc",
        "fi",
        f"n=0; while [ ! -f {d}/rc ]; do n=$((n+1)); [ $n -gt {ticks} ] && exit 124; sleep 0.05; done",
        f'cat {d}/out 2>/dev/null; cat {d}/err >&2 2>/dev/null; exit "$(cat {d}/rc)"',
    ]
    return "bash -c " + q("\n".join(lines))
