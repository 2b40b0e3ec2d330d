"""The program attacks sandboxkit's own machinery (issue 20).

In RL a program that hijacks its sandbox once gets every later rollout in that sandbox scored
its way: reward hacking waiting to be learned. So a program must not be able to reach what
sandboxkit runs around it: the helper processes that start programs and collect exit codes,
files the host writes next, and state that would survive into the next, unrelated run.

Each test plays one attack, then checks the *next* run: a program that prints the right answer
and exits 1 must still report exit 1 (a hijacked helper reports 0, a pass), within its timeout.
The attacks that kill processes only ever target processes inside the sandbox: the program is
told the test runner's own pid namespace and process ancestry and leaves those alone, so a
backend without a pid namespace cannot turn the test into an attack on the machine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import secrets
import time
from pathlib import Path

import anyio
import pytest

from sandboxkit.base import Backend, Sandbox
from sandboxkit.errors import SandboxCrashed, SandboxError
from sandboxkit.models import Limits, RunResult, Status
from sandboxkit.pool import SandboxPool
from sandboxkit.testing.conformance._base import TIMEOUT_GRACE_S, ConformanceBase

#: A wrong submission: the right answer on stdout, and a failing exit code.
VICTIM = "print(42)\nraise SystemExit(1)"

#: Module names sandboxkit's helpers (or Python's start-up) might import after a program ran.
SHADOWED = (
    "base64", "ctypes", "errno", "fcntl", "json", "os", "pickle", "resource", "select", "selectors",
    "shutil", "signal", "struct", "subprocess", "tempfile", "traceback", "sitecustomize", "usercustomize",
)  # fmt: skip

_HIJACK = r"""# Planted by sandboxkit's conformance suite. If sandboxkit's machinery ever imports this file,
# every exit status it waits for becomes 0 (a failing program "passes") and HIJACKED is written.
import os as _os, sys as _sys
try:
    with open(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "HIJACKED"), "a") as _f:
        _f.write(__name__ + "\n")
except OSError:
    pass
def _zero(real):
    def wait(*args, **kwargs):
        got = real(*args, **kwargs)
        return (got[0], 0) + tuple(got[2:]) if isinstance(got, tuple) and got and got[0] else got
    return wait
for _name in ("waitpid", "wait4", "wait"):
    if hasattr(_os, _name):
        setattr(_os, _name, _zero(getattr(_os, _name)))
"""
_FORWARD = r"""# Then become the real module, so whoever imported this keeps working and notices nothing.
_here = _os.path.dirname(_os.path.abspath(__file__))
_saved = _sys.path[:]
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
_sys.modules.pop(__name__, None)
try:
    import importlib as _importlib
    _real = _importlib.import_module(__name__)
finally:
    _sys.path[:] = _saved
_sys.modules[__name__] = _real
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
"""

#: Kill the sandbox's helpers: the parent always, and everything else in the sandbox when the
#: program has a pid namespace of its own. Never a process of the test runner (see module doc).
_KILLER = r"""
import os
HOST_PIDNS, SPARE, SIG = {host_ns!r}, set({spare!r}), {sig}
def own_pid_namespace():
    try:
        return os.readlink("/proc/self/ns/pid") != HOST_PIDNS
    except OSError:
        return False
targets = {{os.getppid()}}
if own_pid_namespace():
    targets |= {{int(p) for p in os.listdir("/proc") if p.isdigit()}} | {{1}}
elif os.getppid() in SPARE:
    targets = set()
for pid in sorted(targets - {{0, os.getpid()}} - (set() if own_pid_namespace() else SPARE)):
    try:
        os.kill(pid, SIG)
    except OSError:
        pass
print("attacked", flush=True)
"""

_STATE = r"""
import ctypes, ctypes.util, json, os, sys
TOKEN, KEY, MODE = {token!r}, {key}, sys.argv[1] if len(sys.argv) > 1 else {mode!r}
libc = ctypes.CDLL(None, use_errno=True)
mq_open = getattr(libc, "mq_open", None)
if mq_open is None:
    mq_open = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True).mq_open
mq_open.restype = ctypes.c_int
paths = {{"tmp": "/tmp/" + TOKEN, "dev_shm": "/dev/shm/" + TOKEN}}
out = {{}}
if MODE == "plant":
    for kind, path in paths.items():
        try:
            with open(path, "w") as f:
                f.write("left by an earlier run")
            out[kind] = True
        except OSError:
            out[kind] = False
    out["sysv_shm"] = libc.shmget(KEY, 4096, 0o1666) >= 0
    out["sysv_msg"] = libc.msgget(KEY, 0o1666) >= 0
    out["mqueue"] = mq_open(("/" + TOKEN).encode(), os.O_CREAT | os.O_RDWR, 0o666, None) >= 0
else:
    for kind, path in paths.items():
        out[kind] = os.path.exists(path)
    out["sysv_shm"] = libc.shmget(KEY, 0, 0) >= 0
    out["sysv_msg"] = libc.msgget(KEY, 0) >= 0
    out["mqueue"] = mq_open(("/" + TOKEN).encode(), os.O_RDONLY) >= 0
print(json.dumps(out))
"""


def _spare_pids() -> list[int]:
    """This process and its ancestors: pids an attack program must never signal."""
    pids, pid = [], os.getpid()
    while pid > 1:
        pids.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return [*pids, 1]


def _killer(sig: int) -> str:
    host_ns = os.readlink("/proc/self/ns/pid") if os.path.exists("/proc/self/ns/pid") else ""
    return _KILLER.format(host_ns=host_ns, spare=_spare_pids(), sig=sig)


def _planted() -> dict[str, bytes | str]:
    plain = {"sitecustomize", "usercustomize"}
    return {f"{name}.py": _HIJACK + ("" if name in plain else _FORWARD) for name in SHADOWED}


def _remove_host_state(token: str, key: int) -> None:
    """Remove what the state test planted, if it landed on this machine (a backend without namespaces)."""
    for path in (f"/tmp/{token}", f"/dev/shm/{token}"):
        Path(path).unlink(missing_ok=True)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        shm = libc.shmget(key, 0, 0)
        if shm >= 0:
            libc.shmctl(shm, 0, None)  # IPC_RMID
        msg = libc.msgget(key, 0)
        if msg >= 0:
            libc.msgctl(msg, 0, None)
        unlink = getattr(libc, "mq_unlink", None) or ctypes.CDLL(ctypes.util.find_library("rt")).mq_unlink
        unlink(f"/{token}".encode())
    except OSError:
        pass


def _assert_victim_scored_right(result: RunResult) -> None:
    assert result.exit_code == 1 and result.status is Status.FAILED, (
        f"a program that exits 1 was reported as {result.status.value} / exit {result.exit_code}: {result}"
    )
    assert result.stdout == "42\n", result


class AttackTests(ConformanceBase):
    """A program cannot reach sandboxkit's own machinery (gated on ``stateful`` / ``resettable``)."""

    def require_stateful(self, backend: Backend, *, resettable: bool = False) -> None:
        self.require_contained()
        caps = backend.capabilities
        if not caps.stateful or (resettable and not caps.resettable):
            pytest.skip("backend does not keep a sandbox across runs (stateful/resettable), so no run follows another")

    async def test_planted_stdlib_modules_and_killed_helpers_do_not_hijack_the_session(
        self, backend: Backend, sandbox: Sandbox
    ) -> None:
        self.require_stateful(backend)
        try:
            await sandbox.run(self.request(_killer(9), files=_planted()))
        except SandboxCrashed:
            pass  # the backend noticed its helper died: fine, as long as what follows is right
        try:
            result = await sandbox.run(self.request(VICTIM))
        except SandboxError:
            return  # an infrastructure error (no reward) is honest; a wrong verdict is not
        _assert_victim_scored_right(result)
        assert await sandbox.read_files(["HIJACKED"]) == {}, "sandboxkit's machinery imported a planted module"

    async def test_planted_modules_do_not_hijack_later_pooled_runs(self, backend: Backend) -> None:
        # The path of issue 20: a session's turn plants modules and kills the helper, its next turn
        # makes the backend start a new helper in that workspace, the session ends, and the same
        # sandbox (reset) then serves unrelated pooled runs: a judge's, a reward function's.
        self.require_stateful(backend, resettable=True)
        async with SandboxPool(backend, max_concurrency=1, max_sandboxes=1, limits=self.limits, retries=0) as pool:
            try:
                async with pool.session() as session:
                    await session.run(_killer(9), files=_planted())
                    await session.run("print(0)")
            except SandboxError:
                pass
            for _ in range(3):
                _assert_victim_scored_right(await pool.run(VICTIM))

    async def test_no_state_survives_into_the_next_pooled_run(self, backend: Backend) -> None:
        self.require_stateful(backend, resettable=True)
        token, key = f"sbk-conf-{secrets.token_hex(4)}", 0x5B000000 + secrets.randbelow(1 << 20)
        try:
            async with SandboxPool(backend, max_concurrency=1, max_sandboxes=1, limits=self.limits) as pool:
                planted = await pool.run(_STATE.format(token=token, key=key, mode="plant"))
                assert planted.status is Status.OK, planted
                made = {kind for kind, ok in json.loads(planted.stdout).items() if ok}
                assert "tmp" in made, f"the program could not write /tmp: {planted.stdout!r}"
                seen = await pool.run(_STATE.format(token=token, key=key, mode="check"))
                assert seen.status is Status.OK, seen
                leaked = sorted(kind for kind, ok in json.loads(seen.stdout).items() if ok and kind in made)
                assert not leaked, f"an earlier, unrelated run's {leaked} was visible to the next pooled run"
        finally:
            _remove_host_state(token, key)

    @pytest.mark.timeout(30)
    async def test_a_fifo_in_place_of_the_next_program_does_not_freeze_the_host(
        self, backend: Backend, sandbox: Sandbox
    ) -> None:
        self.require_stateful(backend)
        fifo = "import os\nfor name in ('main.py', 'main.sh', 'stdin.txt'):\n    try:\n        os.remove(name)\n    except OSError:\n        pass\n    os.mkfifo(name)\n"
        await sandbox.run(self.request(fifo))
        limits = Limits(timeout_s=3)
        started = time.monotonic()
        try:
            with anyio.fail_after(limits.timeout_s + 2 * TIMEOUT_GRACE_S):
                result = await sandbox.run(self.request("print(1)", limits=limits))
        except SandboxError:
            result = None
        assert time.monotonic() - started < limits.timeout_s + 2 * TIMEOUT_GRACE_S
        if result is not None:
            assert result.status is Status.OK and result.stdout == "1\n", result

    @pytest.mark.timeout(30)
    @pytest.mark.parametrize("sig", [15, 2], ids=["SIGTERM", "SIGINT"])
    async def test_signalling_pid1_and_the_parent_gives_a_result_or_crash_never_a_hang(
        self, backend: Backend, sig: int
    ) -> None:
        self.require_contained()
        async with SandboxPool(backend, max_concurrency=1, max_sandboxes=1, limits=self.limits, retries=0) as pool:
            started = time.monotonic()
            try:
                with anyio.fail_after(self.limits.timeout_s + 2 * TIMEOUT_GRACE_S):
                    await pool.run(_killer(sig) + "import time\ntime.sleep(1)\nprint('survived')")
            except SandboxCrashed:
                pass
            assert time.monotonic() - started < self.limits.timeout_s + 2 * TIMEOUT_GRACE_S
            _assert_victim_scored_right(await pool.run(VICTIM))
