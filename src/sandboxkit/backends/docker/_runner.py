"""sandboxkit's in-container runner: PID 1 of every Docker sandbox (standard library only, Python >= 3.8).

The host starts it once per container (``python3 -c <this file> WORKDIR``) and talks to it over
the container's attached stdin/stdout, so a run costs one round trip on an open socket instead of
a ``docker exec`` (an API call, a runc invocation and a fresh process tree, ~60-200 ms).

Why PID 1: the kernel ignores SIGKILL/SIGTERM sent to a namespace's init from inside it, so the
program (same uid) cannot kill its supervisor; every orphan is re-parented to us, so after each
step ``kill(-1, SIGKILL)`` plus reaping until ``ECHILD`` proves the container holds nothing else
(double-forked daemons included). The runner is marked non-dumpable, so a program cannot ptrace it
or open ``/proc/1/mem`` / ``/proc/1/fd``.

Framing (both directions): ``>II`` = (json_len, blob_len), a UTF-8 JSON header, then a blob area.
Bulky or private data (source code, stdin, program output) travels only in the blob area, read
into and sent from reusable buffers that are zeroed after each reply, so a later program cannot
find an earlier run's inputs or outputs in the memory it inherits from this process by fork.
"""

from __future__ import annotations

import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback
import types
from typing import Any

HEAD = struct.Struct(">II")
WORKDIR = sys.argv[1] if len(sys.argv) > 1 else "/work"
#: Only as a container's init may we SIGKILL "everything else" (kill(-1)); anywhere else that is a host.
IS_INIT = os.getpid() == 1
SCRUB_DIRS = ("/tmp", "/dev/shm")
BASE_SYS_PATH = [p for p in sys.path if p]
_SCRATCH = bytearray(65536)
PR_SET_DUMPABLE = 4
CHILD_NICE = 10
#: The environment programs get unless a request adds to it; the runner lives in it, so children inherit it.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG")
_LIBC: Any = None
_STDIO: tuple[Any, Any, Any] = (None, None, None)
_OOM_SEEN = -1
_BUFFERS: list[bytearray] = []


# ----------------------------------------------------------------------------- framing


def _read_into(view: memoryview) -> bool:
    """Fill ``view`` from stdin; False on EOF (the host went away)."""
    got = 0
    while got < len(view):
        n = os.readv(0, [view[got:]])
        if n == 0:
            return False
        got += n
    return True


def receive() -> tuple[dict[str, Any], bytearray] | None:
    head = bytearray(HEAD.size)
    if not _read_into(memoryview(head)):
        return None
    json_len, blob_len = HEAD.unpack(head)
    header = bytearray(json_len)
    blobs = bytearray(blob_len)
    if not (_read_into(memoryview(header)) and _read_into(memoryview(blobs))):
        return None
    return json.loads(header.decode("utf-8")), blobs


def send(header: dict[str, Any], views: list[memoryview]) -> None:
    data = json.dumps(header, separators=(",", ":")).encode("utf-8")
    parts: list[Any] = [HEAD.pack(len(data), sum(len(v) for v in views)), data, *[v for v in views if len(v)]]
    while parts:
        n = os.writev(1, parts)
        while parts and n >= len(parts[0]):
            n -= len(parts[0])
            parts.pop(0)
        if parts and n:
            parts[0] = memoryview(parts[0])[n:]


def buffer(slot: int, size: int) -> bytearray:
    """A reusable output buffer of at least ``size`` bytes (grown, never shrunk)."""
    while len(_BUFFERS) <= slot:
        _BUFFERS.append(bytearray(0))
    if len(_BUFFERS[slot]) < size:
        _BUFFERS[slot] = bytearray(size)
    return _BUFFERS[slot]


# ----------------------------------------------------------------------------- processes


def kill_all(want: int = 0) -> int | None:
    """SIGKILL every process in the container but us; reap them all. Returns ``want``'s wait status."""
    status: int | None = None
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # init (us) is exempt
        except OSError:
            pass
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            return status
        if pid == want:
            status = st


def leftovers() -> bool:
    """Whether any process besides us is left. Orphans are re-parented to us before their parent
    is reported dead, so "no children" means an empty container, and the costly ``kill(-1)``
    (the kernel scans every process of the host for it) can be skipped."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def oom_kills() -> int:
    """The memory cgroup's OOM-kill counter (v1 or v2), or -1 when it cannot be read."""
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return -1


def resolve(exe: str, path: str, cwd: str) -> str | None:
    if "/" in exe:
        full = os.path.join(cwd, exe)
        return full if os.access(full, os.X_OK) else None
    for folder in path.split(":"):
        full = os.path.join(folder or ".", exe)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return None


def child(step: dict[str, Any], exe: str | None, fds: tuple[int, int, int]) -> None:
    """In the forked child: confine, wire the pipes, then exec (or run Python in place). Never returns.

    Every Python-level write here copies a page shared with the runner (copy-on-write), so the
    fast path does as little as it can: the stdio objects and the usual environment are ready.
    """
    try:
        os.setsid()
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")  # the OOM killer takes the program, never the runner
            os.close(fd)
        except OSError:
            pass
        # Below the runner within the container's CPU group (nice only weighs tasks of one cgroup
        # against each other, so the program loses nothing to the host): a fork bomb cannot
        # starve the runner past the deadline it enforces.
        os.nice(CHILD_NICE)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the runner's own handler
        if not step.get("python"):  # ignored signals stay ignored across exec: give programs the defaults
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        cpu = int(step["cpu"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if step.get("fsize"):
            resource.setrlimit(resource.RLIMIT_FSIZE, (step["fsize"], step["fsize"]))
        if step.get("nofile"):
            resource.setrlimit(resource.RLIMIT_NOFILE, (step["nofile"], step["nofile"]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 20)
        os.chdir(step["cwd"])
        if step.get("python"):
            if _LIBC is not None:  # exec would do this; in place, a program may read its own /proc/self
                _LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            python_main(step)
        assert exe is not None
        os.execve(exe, step["argv"], step["env"])
    except BaseException as exc:
        try:
            os.write(2, ("sandboxkit runner: cannot start {!r}: {}\n".format(step["argv"][0], exc)).encode())
        finally:
            os._exit(127)


def make_stdio() -> tuple[Any, Any, Any]:
    """``sys.stdin/stdout/stderr`` as ``python3 -u`` makes them, over fds 0-2 (the child's pipes after dup2).

    Built once in the runner, never used there, so each fast-path child starts with fresh ones.
    """
    stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), "utf-8", "surrogateescape")
    stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), "utf-8", "surrogateescape", write_through=True)  # type: ignore[type-var]
    stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), "utf-8", "backslashreplace", write_through=True)  # type: ignore[type-var]
    return stdin, stdout, stderr


def python_main(step: dict[str, Any]) -> None:
    """Run ``python3 -u SCRIPT ARGS`` without a new interpreter (the warm fast path). Never returns."""
    script, args = step["python"]["script"], step["python"]["args"]
    if os.environ != step["env"]:
        os.environ.clear()
        os.environ.update(step["env"])
    sys.argv = [script, *args]
    sys.path[:] = [os.getcwd(), *BASE_SYS_PATH]
    stdin, stdout, stderr = _STDIO
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    for name, stream in (("__stdin__", stdin), ("__stdout__", stdout), ("__stderr__", stderr)):
        setattr(sys, name, stream)
    main = types.ModuleType("__main__")
    main.__file__ = os.path.abspath(script)
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    main.__spec__ = None
    main.__loader__ = None
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(script, "rb") as fh:
            source = fh.read()
        exec(compile(source, main.__file__, "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # hide this function's frame
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads
        import atexit

        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


class Sink:
    """Collects one output stream into a fixed buffer; bytes past the cap only set ``over``."""

    def __init__(self, slot: int, cap: int) -> None:
        self.view = memoryview(buffer(slot, cap))[:cap]
        self.n = 0
        self.over = False

    def read(self, fd: int) -> bool:
        """Read what is there; True at EOF."""
        try:
            if self.n < len(self.view):
                k = os.readv(fd, [self.view[self.n :]])
                self.n += k
            else:
                k = os.readv(fd, [memoryview(_SCRATCH)])
                self.over = self.over or k > 0
        except BlockingIOError:
            return False
        return k == 0


def run_step(step: dict[str, Any], blobs: memoryview, slot: int) -> tuple[dict[str, Any], list[memoryview]]:
    exe = None
    if not step.get("python"):
        exe = resolve(step["argv"][0], step["env"].get("PATH", ""), step["cwd"])
        if exe is None:
            return {"missing": step["argv"][0]}, []
    off, size = step.get("stdin") or (0, 0)
    stdin = blobs[off : off + size]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child(step, exe, (in_r, out_w, err_w))
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    sinks = {out_r: Sink(slot, step["cap"]), err_r: Sink(slot + 1, step["cap"])}
    try:
        pidfd = os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pidfd = -1  # old kernel, old Python or a seccomp profile without pidfd_open: poll waitpid
    poller = select.poll()
    for fd in sinks:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    poller.register(0, 0)  # only POLLHUP/POLLERR: the host hung up mid-run (it died): stop everything
    if len(stdin):
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)
        in_w = -1
    deadline = started + float(step["timeout"])
    status: int | None = None
    ended = 0.0
    timed_out = over = False
    written = 0
    open_fds = set(sinks)
    while status is None and not over:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        events = poller.poll(max(1, int(min(remaining, 0.01 if pidfd < 0 else remaining) * 1000)))
        for fd, mask in events:
            if fd == 0 and mask & (select.POLLHUP | select.POLLERR):
                kill_all()
                os._exit(0)
            if fd in open_fds:
                if sinks[fd].read(fd):
                    poller.unregister(fd)
                    open_fds.discard(fd)
                over = over or sinks[fd].over
            elif fd == in_w:
                try:
                    written += os.write(in_w, stdin[written : written + 65536])
                except BlockingIOError:
                    pass
                except OSError:  # the program closed its stdin (EPIPE): stop feeding it
                    written = len(stdin)
                if written >= len(stdin):
                    poller.unregister(in_w)
                    os.close(in_w)
                    in_w = -1
        if status is None and (pidfd < 0 or any(fd == pidfd for fd, _ in events)):
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status, ended = st, time.monotonic()
    if not ended:
        ended = time.monotonic()
    if status is None or leftovers():
        killed_status = kill_all(pid)  # daemons, leftovers and (on timeout) the program itself
        if status is None:
            status = killed_status
    for fd in open_fds:  # every writer is dead now: drain what the pipes still hold
        os.set_blocking(fd, True)
        while not sinks[fd].read(fd):
            pass
    over = over or any(s.over for s in sinks.values())
    for fd in [*sinks, pidfd, in_w]:
        if fd >= 0:
            os.close(fd)
    global _OOM_SEEN
    oom_before, _OOM_SEEN = _OOM_SEEN, oom_kills()  # nothing runs between steps: no OOM goes unseen
    out, err = sinks[out_r], sinks[err_r]
    result = {
        "exit": os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        "timed_out": timed_out,
        "over": over,
        "oom": _OOM_SEEN > oom_before >= 0,
        "out_len": out.n,
        "err_len": err.n,
        "out_trunc": out.over,
        "err_trunc": err.over,
        "duration": ended - started,
    }
    return result, [out.view[: out.n], err.view[: err.n]]


# ----------------------------------------------------------------------------- operations


def write_files(entries: list[list[Any]], blobs: memoryview) -> None:
    for rel, off, size, mode in entries:
        path = os.path.join(WORKDIR, rel)
        if os.path.dirname(path) != WORKDIR:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            view = blobs[off : off + size]
            while len(view):
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def wipe(top: str) -> None:
    """Remove everything under ``top`` (not ``top`` itself), even what the program made read-only."""
    for entry in os.scandir(top):
        if entry.is_dir(follow_symlinks=False):
            os.chmod(entry.path, 0o700)
            wipe(entry.path)
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)


def handle(header: dict[str, Any], blobs: memoryview) -> tuple[dict[str, Any], list[memoryview]]:
    op = header.get("op")
    if op == "ping":
        return {"ok": True}, []
    if op == "reset":
        if leftovers():
            kill_all()
        os.chmod(WORKDIR, 0o700)
        wipe(WORKDIR)
        for top in SCRUB_DIRS:
            try:
                wipe(top)
            except OSError:
                pass
        return {"ok": True}, []
    if op == "run":
        write_files(header.get("write", []), blobs)
        results: list[dict[str, Any]] = []
        views: list[memoryview] = []
        for index, step in enumerate(header["steps"]):
            result, outs = run_step(step, blobs, 2 * index)
            results.append(result)
            views.extend(outs)
            if result.get("missing") or (step.get("gate") and result["exit"] != 0):
                break
        return {"ok": True, "steps": results}, views
    return {"ok": False, "error": f"unknown op {op!r}"}, []


def main() -> None:
    if not IS_INIT:  # kill(-1) and wiping WORKDIR are only safe inside a container of our own
        sys.exit("sandboxkit runner: refusing to run outside a container (it must be PID 1)")
    global _LIBC, _STDIO, _OOM_SEEN
    try:
        import ctypes

        _LIBC = ctypes.CDLL(None)
        _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, no /proc/1/mem, /proc/1/fd
    except Exception:
        pass
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # init ignores it otherwise: let `docker stop` work
    os.chdir(WORKDIR)
    for key in [k for k in os.environ if k not in BASE_ENV_KEYS]:
        del os.environ[key]
    _STDIO = make_stdio()
    _OOM_SEEN = oom_kills()
    send({"hello": 1, "python": list(sys.version_info[:3]), "uid": os.getuid(), "pidfd": hasattr(os, "pidfd_open")}, [])
    while True:
        frame = receive()
        if frame is None:
            kill_all()
            os._exit(0)  # the host hung up: we are done (the container is removed with us)
        header, blobs = frame
        view = memoryview(blobs)
        try:
            reply, views = handle(header, view)
        except Exception:
            reply, views = {"ok": False, "error": traceback.format_exc(limit=3)}, []
        reply["id"] = header.get("id")
        send(reply, views)
        for v in views:  # forget this run's inputs and outputs (see the module docstring)
            v[:] = bytes(len(v))
        view[:] = bytes(len(view))
        if _SCRATCH.count(0) != len(_SCRATCH):  # it held bytes past an output cap
            _SCRATCH[:] = bytes(len(_SCRATCH))


if __name__ == "__main__":
    main()
