"""Checks of a backend's Python kernel, shared by the subprocess and Docker kernel tests.

Each takes an open sandbox whose backend claims ``capabilities.kernels`` and drives its kernel
through the same calls ``Session.python`` makes; a backend's own test module adds what only it
can check (host processes, containers).
"""

from __future__ import annotations

import asyncio
import os
import time

from sandboxkit.base import Sandbox
from sandboxkit.kernel import CellResult, CellStatus

#: A hostile cell must end within its timeout plus this: the issue's bound (1 s), widened in proportion to
#: how oversubscribed the machine is when the suite starts (load average per core, capped at 5x), so a
#: quiet CI machine holds the exact bound while a fresh-machine run at load 25 on 2 cores (2.1 s seen for
#: a 1 s cell) does not fail for the scheduler's delay rather than the kernel's.
SLACK_S = 1.0 * min(5.0, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))


async def cell(sandbox: Sandbox, code: str, **kw: object) -> CellResult:
    kernel = await sandbox.open_kernel()
    return await kernel.run(code, **kw)  # type: ignore[arg-type]


async def check_state_and_rendering(sandbox: Sandbox) -> None:
    """Definitions survive between cells; value, stdout, stderr and traceback look like a notebook's."""
    first = await cell(sandbox, "def double(x):\n    return 2 * x\ncounter = [1]\nprint('defined')\ndouble(21)")
    assert first.status is CellStatus.OK, first
    assert (first.stdout, first.value, first.restarted, first.state_lost) == ("defined\n", "42", False, False)
    second = await cell(sandbox, "counter.append(double(5))\nimport sys; print('warn', file=sys.stderr)")
    assert second.ok and second.value is None and second.stderr == "warn\n", second
    third = await cell(sandbox, "counter")
    assert third.value == "[1, 10]", third
    # Output of processes the cell starts is the cell's output; files are the sandbox's own.
    shell = await cell(sandbox, "import os\nos.system('echo from-shell')\nopen('k.txt', 'w').write('kernel')")
    assert shell.stdout == "from-shell\n" and shell.value == "6", shell
    assert (await sandbox.read_files(["k.txt"])) == {"k.txt": b"kernel"}
    error = await cell(sandbox, "def boom():\n    return 1 / 0\n\nboom()")
    assert error.status is CellStatus.ERROR and error.error_name == "ZeroDivisionError", error
    assert error.error_value == "division by zero"
    assert error.traceback is not None and "_kernel_main" not in error.traceback and "kernel" not in error.traceback
    assert error.traceback.startswith('Traceback (most recent call last):\n  File "<cell ')
    assert "return 1 / 0" in error.traceback, error.traceback  # the cell's source is shown
    later = await cell(sandbox, "boom()")  # defined in an earlier cell: its source still shows
    assert "return 1 / 0" in (later.traceback or ""), later
    syntax = await cell(sandbox, "1 +")
    assert syntax.error_name == "SyntaxError" and "Traceback" not in (syntax.traceback or ""), syntax
    assert (await cell(sandbox, "double(counter[-1])")).value == "20"  # errors keep the state
    exited = await cell(sandbox, "raise SystemExit(3)")
    assert exited.error_name == "SystemExit" and not exited.state_lost, exited
    assert (await cell(sandbox, "len(counter)")).value == "2"


async def check_hostile_cells(sandbox: Sandbox, *, memory_status: tuple[CellStatus, ...]) -> None:
    """Infinite loop, memory bomb, fork bomb, os._exit: right status in time, restart, next cell runs."""
    await cell(sandbox, "kept = 1")
    for code, timeout, statuses in (
        ("while True:\n    pass", 1.0, (CellStatus.TIMEOUT,)),
        ("import os\nos._exit(7)", 5.0, (CellStatus.CRASHED,)),
        ("hog = [bytearray(1 << 26) for _ in range(1 << 12)]", 5.0, memory_status),
        ("import os\nwhile True:\n    os.fork()", 1.0, (CellStatus.TIMEOUT, CellStatus.ERROR)),
        (
            "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(60)\nwhile True:\n    pass",
            1.0,
            (CellStatus.TIMEOUT,),
        ),
    ):
        started = time.monotonic()
        result = await cell(sandbox, code, timeout=timeout)
        took = time.monotonic() - started
        assert result.status in statuses, (code, result)
        assert took < timeout + SLACK_S, (code, took, result)
        if result.status in (CellStatus.TIMEOUT, CellStatus.CRASHED):
            assert result.state_lost, result
        after = await cell(sandbox, "'alive'")
        assert after.ok and after.value == "'alive'", (code, after)
        await cell(sandbox, "kept = 1")
    os_exit = await cell(sandbox, "import os; os._exit(3)")
    assert "code 3" in (os_exit.error_value or ""), os_exit
    again = await cell(sandbox, "'kept' in dir()")
    assert again.value == "False" and again.restarted and not again.state_lost, again


#: A cell that lists the kernel's zombies: processes that ended but whose pid is still held.
_ZOMBIES = """import os
held = []
for entry in os.listdir('/proc'):
    try:
        with open(f'/proc/{entry}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError):
        continue
    if fields[0] == 'Z' and int(fields[1]) in (os.getpid(), os.getppid()):
        held.append(int(entry))
held"""


async def check_pids_come_back(sandbox: Sandbox, pids: int) -> None:
    """What a cell started and the kernel killed gives its pid back: fork bombs never fill the limit.

    A killed process stays a zombie, holding its pid, until its parent waits for it: the
    supervisor for a fork bomb's orphans, the worker for its own children (a ``Popen`` the
    namespace keeps learns how that child ended).
    """
    for _ in range(3):
        bomb = await cell(sandbox, "import os\nwhile True:\n    os.fork()", timeout=1.0)
        assert bomb.status in (CellStatus.TIMEOUT, CellStatus.ERROR), bomb
        assert (await cell(sandbox, _ZOMBIES)).value == "[]"
    left = await cell(sandbox, "import subprocess\nchild = subprocess.Popen(['sleep', '60'])")
    assert left.ok, left
    assert (await cell(sandbox, _ZOMBIES)).value == "[]"
    assert (await cell(sandbox, "child.poll()")).value == "-9"  # killed when its cell ended
    # A SIGKILLed process holds its pid until it has really exited, which on a loaded machine can take a
    # moment after the cell ended: the pids must come back, so the check waits for them (bounded).
    spawn = f"import os\nfor _ in range({pids // 2}):\n    if os.fork() == 0:\n        os._exit(0)"
    deadline = time.monotonic() + 15.0
    while not (spawned := await cell(sandbox, spawn)).ok and time.monotonic() < deadline:
        assert spawned.error_name == "BlockingIOError", spawned  # EAGAIN: pids still held; anything else fails
        await asyncio.sleep(0.5)
    assert spawned.ok, spawned


async def check_output_limits(sandbox: Sandbox, output_bytes: int) -> None:
    """Long output keeps head and tail (marked); a flood is interrupted and the state survives."""
    await cell(sandbox, "state = 'here'")
    # Under the cap, past the head and half the tail: all of it, unflagged (the tail once kept only its end).
    fits = await cell(sandbox, f"print('F' * {output_bytes * 7 // 8 - 1})")
    assert not fits.truncated and fits.stdout == "F" * (output_bytes * 7 // 8 - 1) + "\n", len(fits.stdout)
    long = await cell(sandbox, f"print('A' * {output_bytes} + 'END')")
    assert long.truncated and long.stdout.startswith("AAAA") and long.stdout.endswith("END\n"), long.stdout[-80:]
    assert "bytes cut ...]" in long.stdout
    big_value = await cell(sandbox, f"'v' * {output_bytes * 2}")
    assert big_value.truncated and big_value.value is not None and len(big_value.value) < output_bytes + 200
    flood = await cell(sandbox, "while True:\n    print('x' * 65536)", timeout=20.0)
    assert flood.status is CellStatus.ERROR and flood.error_name == "OutputLimitExceeded", flood.error_value
    assert flood.truncated and not flood.state_lost
    assert (await cell(sandbox, "state")).value == "'here'"


async def check_fresh(sandbox: Sandbox) -> None:
    """``fresh=True`` gives a new interpreter without claiming state was lost."""
    await cell(sandbox, "old = 1")
    fresh = await cell(sandbox, "'old' in dir()", fresh=True)
    assert fresh.value == "False" and fresh.restarted and not fresh.state_lost, fresh


async def check_stopped_supervisor(sandbox: Sandbox) -> None:
    """A cell that stops the kernel's own supervisor (same uid) is ended by the host's timer, in time."""
    await cell(sandbox, "kept = 1")
    started = time.monotonic()
    result = await cell(
        sandbox, "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nwhile True:\n    pass", timeout=1.0
    )
    took = time.monotonic() - started
    assert result.status is CellStatus.TIMEOUT and result.state_lost, result
    assert took < 1.0 + SLACK_S, took
    after = await cell(sandbox, "'kept' in dir()")
    assert after.ok and after.value == "False" and after.restarted, after


async def check_shell_mode(sandbox: Sandbox) -> bool:
    """IPython cells where the sandbox's python3 has IPython, plain Python (said so) where it has not.

    Returns whether the sandbox ran the IPython mode, so a backend's test can require it where
    its sandboxes should have IPython.
    """
    probe = await sandbox.exec("python3 -I -c 'import IPython'", timeout=30)
    has_ipython = probe.exit_code == 0
    echoed = await cell(sandbox, "!echo from-shell")
    if not has_ipython:  # the clean fallback: the kernel still runs, and every answer says how
        assert echoed.shell == "python" and echoed.error_name == "SyntaxError", echoed
        plain = await cell(sandbox, "6 * 7")
        assert plain.shell == "python" and plain.display == [{"text/plain": "42"}], plain
        return False
    assert echoed.shell == "ipython" and echoed.stdout == "from-shell\n", echoed
    shown = await cell(sandbox, "from IPython.display import display, HTML\ndisplay(HTML('<i>x</i>'))\nx = 45\nx;")
    assert shown.display == [{"text/plain": "<IPython.core.display.HTML object>", "text/html": "<i>x</i>"}], shown
    timed = await cell(sandbox, "%time y = x + 1")
    assert "Wall time: " in timed.stdout and timed.value is None, timed
    awaited = await cell(sandbox, "import asyncio\nawait asyncio.sleep(0)\ny")
    assert awaited.value == "46" and awaited.display == [{"text/plain": "46"}], awaited
    return True
