"""sandboxkit's in-container runner: PID 1 of every Docker sandbox (standard library only, Python >= 3.8).

The host starts it once per container (``python3 -c <this file> WORKDIR UID``) and talks to it over
the container's attached stdin/stdout, so a run costs one round trip on an open socket instead of
a ``docker exec`` (an API call, a runc invocation and a fresh process tree, ~60-200 ms).

Why PID 1: the kernel delivers a signal sent to a namespace's init from inside it only if init
handles that signal, and never SIGKILL/SIGSTOP. The runner handles none (every disposition is the
default or "ignore"), so the program cannot signal its supervisor at all; the host tears a
container down with SIGKILL through the engine API. The runner is also root (with only the
capabilities of ``supervise``) while every program runs as uid 1000 with none, so the same-uid
rules that let a process ``prlimit``, renice or pin another do not reach it. Every orphan is
re-parented to us, so after each step ``kill(-1, SIGKILL)`` plus reaping until ``ECHILD`` proves
the container holds nothing else (double-forked daemons included). The runner is marked
non-dumpable, so a program cannot ptrace it or open ``/proc/1/mem`` / ``/proc/1/fd``.

This is one file on purpose (it is passed as ``python3 -c``), which is why it is longer than the
project's other modules. Its one sandboxkit import, of the helpers every in-sandbox program shares, is
replaced by their definitions when the text is shipped (:func:`sandboxkit._standalone.standalone_source`).

Framing (both directions): ``>II`` = (json_len, blob_len), a UTF-8 JSON header, then a blob area.
Bulky or private data (source code, stdin, each step's argv/env/cwd, program output, fetched
files) travels only in the blob area, read into and sent from buffers that are zeroed after each
reply, so a later program cannot find an earlier run's inputs or outputs in the memory it inherits
from this process by fork. The runner itself never decodes a step's private part: only the forked
child parses it (in its own copy of the memory), so no Python string holding an env value or an
argument is ever allocated, and later freed unzeroed, in the runner's heap.

Output keeps both ends (the contract of ``sandboxkit.output``, which cannot be imported here): per
stream the first ``head`` bytes and, in a ring buffer, the last ``tail`` bytes; the host joins them
with the cut marker. The program runs on past the cap and is stopped only past ``stop`` bytes.
"""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import select
import signal
import stat
import struct
import sys
import time
import traceback
import types
from typing import Any

from sandboxkit._in_sandbox_std import exit_code, set_dumpable

HEAD = struct.Struct(">II")
WORKDIR = sys.argv[1] if len(sys.argv) > 1 else "/work"
#: Only as a container's init may we SIGKILL "everything else" (kill(-1)); anywhere else that is a host.
IS_INIT = os.getpid() == 1
SCRUB_DIRS = ("/tmp", "/dev/shm", "/dev/mqueue")
IPC_RMID = 0
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
#: Files fetched through the channel up to this size each (and this much per call); larger ones
#: are only checked here and then copied by the host with ``get_archive``.
INLINE_FILE_MAX = 1 << 20
INLINE_CALL_MAX = 4 << 20
BASE_SYS_PATH = [p for p in sys.path if p]
_SCRATCH = bytearray(65536)
#: The uid and gid programs run as (the runner's own when it is not started as root).
SANDBOX_ID = 1000  # set from argv by main()
#: True when the runner is root with only the capabilities it needs (see :func:`supervise`).
_SUPERVISOR = False
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
    parsed = json.loads(header.decode("utf-8"))
    header[:] = bytes(json_len)  # it holds nothing private (that is in the blobs), but leave no copy
    return parsed, blobs


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
        return full if os.path.exists(full) else None
    for folder in path.split(":"):
        full = os.path.join(folder or ".", exe)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return None


def child(step: dict[str, Any], blobs: memoryview, fds: tuple[int, int, int], report: int) -> None:
    """In the forked child: confine, wire the pipes, then exec (or run Python in place). Never returns.

    The step's private part (argv, env, cwd, the Python script) is decoded only here, in the
    child's own copy of the memory. ``report`` is a close-on-exec pipe to the runner: a failure
    before the program starts is written there (``M`` command not found, ``X`` reason: the
    runner could not start it), so it is never mistaken for the program's own exit status.

    Every Python-level write here copies a page shared with the runner (copy-on-write), so the
    fast path does as little as it can: the stdio objects and the usual environment are ready.
    """
    argv0 = "?"
    try:
        off, size = step["private"]
        private = json.loads(bytes(blobs[off : off + size]).decode("utf-8"))
        argv0 = private["argv"][0]
        # The program gets its stdin through the pipe only, never a copy in the memory it starts with:
        # the judge's isolated harness sends the tests there to keep them from the solution it forks.
        off, size = step.get("stdin") or (0, 0)
        if size:
            blobs[off : off + size] = bytes(size)
        os.setsid()
        if _SUPERVISOR:  # become the program's user for good: no capability survives this
            os.setgroups([])
            os.setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
            os.setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
        set_dumpable(True)  # exec would do this; before it (and in place) /proc/self must be ours
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
        cpu = int(step["cpu"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if step.get("fsize"):
            resource.setrlimit(resource.RLIMIT_FSIZE, (step["fsize"], step["fsize"]))
        if step.get("nofile"):
            resource.setrlimit(resource.RLIMIT_NOFILE, (step["nofile"], step["nofile"]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, report)
        os.closerange(report + 1, 1 << 20)
        os.chdir(private["cwd"])
        if private.get("python"):
            # What ``python3`` sets up at start (the runner keeps SIGINT at its default: it is init).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.close(report)
            python_main(private)
        exe = resolve(argv0, private["env"].get("PATH", ""), private["cwd"])
        if exe is None:
            os.write(report, b"M")
            os._exit(127)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # ignored signals stay ignored across exec
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        try:
            os.execve(exe, private["argv"], private["env"])
        except OSError as exc:  # what a shell says: the program's own failure, not the runner's
            os.write(2, f"{argv0}: {os.strerror(exc.errno or errno.EIO)}\n".encode("utf-8", "replace"))
            os._exit(126 if exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EISDIR) else 127)
    except BaseException as exc:
        try:
            os.write(report, f"X cannot start {argv0!r}: {exc}".encode("utf-8", "replace"))
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


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


def python_main(private: dict[str, Any]) -> None:
    """Run ``python3 -u SCRIPT ARGS`` without a new interpreter (the warm fast path). Never returns.

    What the program sees matches a fresh ``python3``: its tracebacks start at its own frames
    (this function's frame is cut off), it gets the same recursion depth (the limit is raised by
    the runner's frames below it), and an uncaught ``KeyboardInterrupt`` ends it by SIGINT.
    """
    script, args = private["python"]["script"], private["python"]["args"]
    if os.environ != private["env"]:
        os.environ.clear()
        os.environ.update(private["env"])
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
    interrupted = False
    sys.setrecursionlimit(sys.getrecursionlimit() + _depth())
    try:
        with open(script, "rb") as fh:
            source = fh.read()
        exec(compile(source, main.__file__, "exec"), main.__dict__)
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # hide this function's frame
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
        interrupted = isinstance(exc, KeyboardInterrupt)
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads
        import atexit

        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    if interrupted:  # python3 re-raises an uncaught KeyboardInterrupt as death by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


class Sink:
    """One output stream: its first ``head`` bytes, its last ``tail`` bytes (a ring), and its length.

    Bytes go straight from the pipe into place (one ``readv`` into the head's free room and the
    ring's two halves), so keeping the end costs no copy. ``over`` turns true once more than
    ``stop`` bytes have arrived: the program is stopped then, and only then.

    ``live`` (1 for stdout, 2 for stderr, 0 for off): each read is also sent to the host at once
    as a ``{"chunk": live}`` frame whose blob is the bytes just read, up to ``stop`` (streaming).
    The bytes are sent from where they were read into, so they are zeroed with the rest.
    """

    def __init__(self, slot: int, head: int, tail: int, stop: int, live: int = 0) -> None:
        view = memoryview(buffer(slot, head + tail))
        self.head, self.ring = view[:head], view[head : head + tail]
        self.n = 0  # bytes in the head
        self.pos = 0  # where the ring is written next
        self.filled = 0  # bytes in the ring
        self.total = 0
        self.stop = stop
        self.over = False
        self.live = live

    def read(self, fd: int) -> bool:
        """Read what is there; True at EOF."""
        room = len(self.head) - self.n
        iov = [self.head[self.n :]] if room else []
        if len(self.ring):
            iov += [v for v in (self.ring[self.pos :], self.ring[: self.pos]) if len(v)]
        elif not room:
            iov = [memoryview(_SCRATCH)]  # no tail kept (head_fraction 1): count and drop
        try:
            k = os.readv(fd, iov)
        except BlockingIOError:
            return False
        if self.live and k and self.total < self.stop:
            chunk, left = [], min(k, self.stop - self.total)
            for part in iov:
                if not left:
                    break
                chunk.append(part[:left])
                left -= len(chunk[-1])
            send({"chunk": self.live}, chunk)
        self.total += k
        into_head = min(k, room)
        self.n += into_head
        if len(self.ring):
            rest = k - into_head
            self.pos = (self.pos + rest) % len(self.ring)
            self.filled = min(len(self.ring), self.filled + rest)
        self.over = self.over or self.total > self.stop
        return k == 0

    def views(self) -> list[memoryview]:
        """The kept bytes in stream order: head, then the ring from its oldest byte."""
        if self.filled < len(self.ring):
            return [self.head[: self.n], self.ring[: self.filled]]
        return [self.head[: self.n], self.ring[self.pos :], self.ring[: self.pos]]

    def facts(self) -> list[int]:
        """``[head bytes, tail bytes, total]``: the host joins head and tail with the cut marker."""
        return [self.n, self.filled, self.total]


def run_step(step: dict[str, Any], blobs: memoryview, slot: int) -> tuple[dict[str, Any], list[memoryview]]:
    off, size = step.get("stdin") or (0, 0)
    stdin = blobs[off : off + size]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    report_r, report_w = os.pipe()  # close-on-exec (PEP 446): EOF once the program runs
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child(step, blobs, (in_r, out_w, err_w), report_w)
    for fd in (in_r, out_w, err_w, report_w):
        os.close(fd)
    head, tail, stop = int(step["head"]), int(step["tail"]), int(step["stop"])
    live = bool(step.get("live"))
    sinks = {
        out_r: Sink(slot, head, tail, stop, 1 if live else 0),
        err_r: Sink(slot + 1, head, tail, stop, 2 if live else 0),
    }
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
    os.set_blocking(report_r, False)
    try:
        report = os.read(report_r, 4096)  # every process is gone: nothing holds its write end
    except BlockingIOError:
        report = b""
    for fd in [*sinks, pidfd, in_w, report_r]:
        if fd >= 0:
            os.close(fd)
    global _OOM_SEEN
    oom_before, _OOM_SEEN = _OOM_SEEN, oom_kills()  # nothing runs between steps: no OOM goes unseen
    out, err = sinks[out_r], sinks[err_r]
    if report.startswith(b"M"):
        return {"missing": True}, []
    if report.startswith(b"X"):
        return {"error": report[2:].decode("utf-8", "replace")}, []
    result = {
        "exit": os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        "timed_out": timed_out,
        "over": over,
        "oom": _OOM_SEEN > oom_before >= 0,
        "out": out.facts(),
        "err": err.facts(),
        "duration": ended - started,
    }
    return result, [*out.views(), *err.views()]


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


def make_links(blobs: memoryview) -> None:
    """Make the symlinks a checkpoint carried as data (``path NUL target NUL`` pairs, paths relative).

    The engine's unpack refuses a relative link whose target climbs out of the workspace, so the
    host keeps those out of the archive and sends them here after it. Made with the program's
    fsuid, like every file we touch; a directory the program made read-only is opened for the
    moment it takes.
    """
    fields = bytes(blobs).split(b"\0")
    for index in range(0, len(fields) - 1, 2):
        rel, target = fields[index], fields[index + 1]
        path = os.path.join(WORKDIR.encode(), rel)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        try:
            os.symlink(target, path)
        except PermissionError:
            parent = os.path.dirname(path)
            mode = stat.S_IMODE(os.lstat(parent).st_mode)
            os.chmod(parent, mode | 0o300)
            try:
                os.symlink(target, path)
            finally:
                os.chmod(parent, mode)


def punch_holes(runs: list[list[int]], blobs: memoryview) -> None:
    """Punch each file's runs of zeros (``path NUL`` in the blobs; ``[offset, length, ...]`` each) back out.

    The engine unpacks a checkpoint dense; this gives the fork's tmpfs (and memory) back what the
    parent's sparse files never used. The content is the same either way, so a file we cannot
    open for writing (the program made it read-only) simply stays dense, and so does everything
    without ctypes.
    """
    if _LIBC is None:
        return
    import ctypes  # already imported by main(); never from the workspace (sys.path was reset)

    paths = bytes(blobs).split(b"\0")
    for index, spans in enumerate(runs[: len(paths)]):
        path = paths[index]
        try:
            fd = os.open(os.path.join(WORKDIR.encode(), path), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            for at in range(0, len(spans) - 1, 2):
                off, length = ctypes.c_int64(spans[at]), ctypes.c_int64(spans[at + 1])
                _LIBC.fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, off, length)
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


def ipc_ids(kind: str) -> list[int]:
    """Ids of the SysV IPC objects of ``kind`` (``shm``, ``msg``, ``sem``) in this IPC namespace."""
    try:
        with open("/proc/sysvipc/" + kind) as fh:
            return [int(line.split()[1]) for line in fh.readlines()[1:] if line.strip()]
    except OSError:
        return []


def remove_ipc() -> list[str]:
    """Remove every SysV shared memory segment, message queue and semaphore set; return what is left.

    They outlive the processes that made them, and shared memory stays charged to the container's
    memory cgroup: left alone, they would carry one tenant's data (and memory use) into the next.
    Every process runs as the runner's uid, so the runner owns (and may remove) all of them.
    """
    if _SUPERVISOR:  # IPC_RMID wants the owner's euid (or CAP_SYS_ADMIN, which we do not hold)
        os.setresuid(-1, SANDBOX_ID, -1)  # nothing runs during a reset; the saved uid brings us back
        try:
            return _remove_ipc()
        finally:
            os.setresuid(-1, 0, -1)
            _LIBC.setfsuid(SANDBOX_ID)  # a change of euid resets the fsuid
    return _remove_ipc()


def _remove_ipc() -> list[str]:
    left = []
    for kind in ("shm", "msg", "sem"):
        for ident in ipc_ids(kind):
            if _LIBC is None:
                break  # no ctypes in this image: report what is left (the host discards the container)
            if kind == "sem":
                _LIBC.semctl(ident, 0, IPC_RMID)
            else:
                getattr(_LIBC, kind + "ctl")(ident, IPC_RMID, None)
        left += [f"{kind} {ident}" for ident in ipc_ids(kind)]
    return left


def reset() -> dict[str, Any]:
    """Give the next run what a fresh container gives: no process, empty workspace, ``/tmp``,
    ``/dev/shm`` and ``/dev/mqueue``, no SysV IPC object. Anything that cannot be removed makes
    the reply an error, and the host then discards the container instead of reusing it."""
    if leftovers():
        kill_all()
    os.chmod(WORKDIR, 0o700)
    wipe(WORKDIR)
    for top in SCRUB_DIRS:
        if os.path.isdir(top):
            wipe(top)
    left = remove_ipc()
    if left:
        return {"ok": False, "error": "IPC objects survived the reset: {}".format(", ".join(left))}
    return {"ok": True}


def open_in_workspace(rel: str) -> int | None:
    """A read-only fd of the regular file ``rel`` under the workspace, or None.

    Opened as the program's uid, one component at a time with ``O_NOFOLLOW``: a symlink the
    program planted anywhere on the path (``etc -> /etc``) is never followed, and a file the
    program itself could not read is not returned. ``O_NONBLOCK``: a FIFO cannot stall us.
    """
    parts = rel.split("/")
    try:
        fd = os.open(WORKDIR, os.O_RDONLY | os.O_DIRECTORY)  # the program may have made it unreadable
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        return None
    return leaf


def read_files(paths: list[str]) -> tuple[dict[str, Any], list[memoryview]]:
    """For each path: ``[0, 0]`` absent, ``[1, size]`` its bytes follow in the blob area, ``[2, size]``
    too large to send here (the host copies it with ``get_archive``: the path is checked, and
    nothing runs in the container between requests that could change it)."""
    states: list[list[int]] = []
    views: list[memoryview] = []
    budget = INLINE_CALL_MAX
    for rel in paths:
        fd = open_in_workspace(rel)
        if fd is None:
            states.append([0, 0])
            continue
        try:
            size = os.fstat(fd).st_size
            if size > min(INLINE_FILE_MAX, budget):
                states.append([2, size])
                continue
            data = bytearray(size)
            got = os.readv(fd, [data]) if size else 0
            states.append([1, got])
            views.append(memoryview(data)[:got])
            budget -= got
        finally:
            os.close(fd)
    return {"ok": True, "files": states}, views


def handle(header: dict[str, Any], blobs: memoryview) -> tuple[dict[str, Any], list[memoryview]]:
    op = header.get("op")
    if op == "ping":
        return {"ok": True}, []
    if op == "reset":
        return reset(), []
    if op == "read":
        return read_files(header["paths"])
    if op == "links":
        make_links(blobs)
        return {"ok": True}, []
    if op == "holes":
        punch_holes(header["runs"], blobs)
        return {"ok": True}, []
    if op == "run":
        write_files(header.get("write", []), blobs)
        results: list[dict[str, Any]] = []
        views: list[memoryview] = []
        for index, step in enumerate(header["steps"]):
            result, outs = run_step(step, blobs, 2 * index)
            results.append(result)
            views.extend(outs)
            if result.get("missing") or result.get("error") or (step.get("gate") and result["exit"] != 0):
                break
        return {"ok": True, "steps": results}, views
    return {"ok": False, "error": f"unknown op {op!r}"}, []


def supervise() -> bool:
    """Started as root: stay root, but touch files as the program's user. True if that holds.

    Why not run as the program's uid: every process of one uid may ``prlimit``, renice, pin or
    set the scheduling class of every other (no capability needed), so a program could set our
    ``RLIMIT_NOFILE`` to 4 or our ``RLIMIT_CPU`` hard limit to 1 s (the kernel then SIGKILLs
    even init), starve us with ``SCHED_IDLE``, or break every later run. As uid 0 we are out of
    the program's reach; the container grants only SETUID/SETGID (to become the program's user
    in each child, and to take its euid while removing its IPC objects on reset) and KILL
    (``kill(-1)`` of its processes), never DAC_OVERRIDE: files are opened with fsuid = the
    program's uid, so the runner reads and writes exactly what the program could. Without ctypes (no ``setfsuid``),
    we fall back to being the program's user ourselves.
    """
    if _LIBC is not None:
        _LIBC.setfsgid(SANDBOX_ID)
        _LIBC.setfsuid(SANDBOX_ID)
        if _LIBC.setfsuid(-1) == SANDBOX_ID:  # an invalid id changes nothing and returns the current one
            return True
    os.setgroups([])
    os.setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
    os.setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
    return False


def main() -> None:
    if not IS_INIT:  # kill(-1) and wiping WORKDIR are only safe inside a container of our own
        sys.exit("sandboxkit runner: refusing to run outside a container (it must be PID 1)")
    global _LIBC, _STDIO, _OOM_SEEN, _SUPERVISOR, SANDBOX_ID
    if len(sys.argv) > 2:
        SANDBOX_ID = int(sys.argv[2])
    # `python3 -c` puts '' (the working directory: the workspace, which the program controls) first
    # on sys.path; an import here after a run could load a module the program planted there.
    sys.path[:] = BASE_SYS_PATH
    set_dumpable(False)  # no ptrace, no /proc/1/mem, /proc/1/fd
    try:
        import ctypes

        _LIBC = ctypes.CDLL(None)
    except Exception:
        pass
    if os.getuid() == 0:
        _SUPERVISOR = supervise()
    # Handle no signal at all: as init, we then receive none from the program (see the module
    # docstring). Python's SIGINT handler would let `kill(1, SIGINT)` end every later run.
    # SIGPIPE and SIGXFSZ stay ignored (a closed stdin pipe must not kill us); children reset them.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.chdir(WORKDIR)
    for key in [k for k in os.environ if k not in BASE_ENV_KEYS]:
        del os.environ[key]
    _STDIO = make_stdio()
    _OOM_SEEN = oom_kills()
    bash = resolve("bash", os.environ.get("PATH", ""), "/") is not None
    hello = {"hello": 1, "runner": "python", "python": list(sys.version_info[:3]), "uid": os.getuid(), "bash": bash}
    send({**hello, "pidfd": hasattr(os, "pidfd_open")}, [])
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
