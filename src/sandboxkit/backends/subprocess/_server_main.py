"""The fork server: the one long-lived process inside a sandbox. Runs with ``python3 -I -u -c``.

It is started once per sandbox, inside the sandbox's namespaces and as the sandbox's user,
and forks one child per command, so a command pays neither interpreter start-up nor
namespace set-up. Python programs run in the forked child directly (no ``exec``); every
other command is ``exec``'d by the child.

Why children do not share state: the server never runs user code and never reads it (a
child reads ``main.py`` from disk after the fork), so every child starts from the same
pristine interpreter, and whatever a child imports or changes dies with it.

Why a program cannot take the server over (issue 20): it starts in isolated mode (``-I``: no
current directory or user site on ``sys.path``, no ``PYTHON*`` variables), imports every module
it will ever use -- its own and the preload list -- before the first command exists, and never
sees a command's environment or arguments: those travel in a pipe that only the forked child
reads, so no earlier run's secrets sit in the heap that later runs inherit.

This file must stay standalone (stdlib only): the host passes its source text to the sandbox's own
``python3``, which cannot see sandboxkit's installation. Its one sandboxkit import, of the helpers
every in-sandbox program shares, is replaced by their definitions when the text is shipped
(:func:`sandboxkit._standalone.standalone_source`).

Command line: ``CTL_FD PRELOAD PRIVATE MODULES_FD WORKSPACE``: the control socket's descriptor, the
comma-separated modules to import before serving, ``1`` when ``/tmp``, ``/dev/shm``, ``/dev/mqueue``
and the IPC namespace are the sandbox's own (then the server reports when a command left state
there), and a file holding sandboxkit's own modules to run before serving (``-``: none): a
``marshal`` list of ``(name, source, magic, bytecode)``, run from the bytecode when ``magic`` is this
interpreter's, else compiled; one that fails is left out (a program then finds no such module);
and the workspace's path inside the sandbox (``-``: the server never wipes it).

Protocol on the control socket (``SOCK_SEQPACKET``, one message per datagram):
    host -> server: ``b"pipes"`` once, right after ``ready``, with two descriptors attached: stdout and
                    stderr write ends the server holds and gives every command (see ``HELD``), when
                    the host keeps one pair of output pipes for the server's life;
                    ``marshal`` dict {"timeout", "sweep", "fresh", "wipe"} with three descriptors attached (stdin
                    read end, stdout and stderr write ends), or with the stdin read end alone after
                    ``pipes``. The stdin pipe starts with the child's
                    part: an 8-byte little-endian length and the ``marshal`` request {"argv"|"python",
                    "cwd", "env", "rlimits"}, with "source" when the child writes the
                    program's file itself (``_write_source``); the program's own stdin follows. Only the forked
                    child reads it (before the program exists), so no pipe more per command;
                    or ``b"kill"`` while a command runs (output stop reached).
    server -> host: ``b"ready"`` once at start; ``b"exit <waitstatus> <timed_out>"`` after each
                    command, then (private state only) ``b"dirty <0|1>"``: whether state is left
                    outside the workspace (see ``_dirty``). Checked after the exit is reported, so
                    its six system calls run while the host collects the result, not before it;
                    the host reads it before a reset, or as the next command's first reply.
                    A command with ``fresh`` set (the first of a new tenant: the host reset the
                    sandbox without waiting for the report) is never run after a dirty report:
                    the server answers ``b"stale"`` instead, and the host restarts it. A command with
                    ``wipe`` set (the host's reset left the workspace to the server) runs after the
                    workspace is emptied, or is answered ``b"unwiped"`` (the host then wipes it).
"""

from __future__ import annotations

import sys

#: Modules loaded before the server's own imports: a workspace file cannot shadow these in
#: ``python3 main.py`` either. Anything the server adds after this, a workspace file may shadow.
_STARTUP = frozenset(sys.modules)

import _socket  # noqa: E402  # not ``socket``: that module pulls in enum/selectors, ~1 MB per sandbox
import atexit  # noqa: E402
import builtins  # noqa: E402
import gc  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

from sandboxkit._in_sandbox_std import exit_code, libc, read_exactly, set_dumpable  # noqa: E402

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing would cost every sandbox memory
if TYPE_CHECKING:
    from typing import Any

#: Not ``ctypes``: its Python layer is ~0.2 MB more in every sandbox, copied by every fork.
_ctypes: Any = __import__("_ctypes")
CTL_FD = int(sys.argv[1])
PRELOAD = [name for name in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if name]
PRIVATE = len(sys.argv) > 3 and sys.argv[3] == "1"
MODULES_FD = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4].isdigit() else -1
#: The workspace as this server sees it (``-``: none), emptied on a command's ``wipe`` (see ``_wipe``).
WORKSPACE = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "-" else ""
os.environ.pop("PWD", None)  # set by bwrap --chdir; programs get exactly the environment the host sent
BASE_ENV = dict(os.environ)
MAX_MSG = 4096
#: ``fcntl`` commands (not the ``fcntl`` module: one import less in every sandbox) and a pipe's default size.
_F_SETFL, _F_SETPIPE_SZ, PIPE_SIZE = 4, 1031, 65536
#: Where a command can leave files outside the workspace (all private to this server's namespaces).
STATE_DIRS = ("/tmp", "/dev/shm", "/dev/mqueue")
#: shmctl(SHM_INFO), msgctl(MSG_INFO), semctl(SEM_INFO): counts of SysV objects in this IPC namespace.
_SHM_INFO, _MSG_INFO, _SEM_INFO = 14, 12, 19
#: The stdout and stderr write ends every command gets, once the host sent ``pipes`` (else each
#: command brings its own). The host reads them for as long as this server lives; a command's output
#: ends where its exit report begins, because every process that could write has been killed by then
#: (the host only sends ``pipes`` where ``sweep`` reaches every process: a PID namespace, no network).
HELD: list[int] = []
#: Top-level names of modules a workspace file may shadow (filled in by ``main``).
SHADOWABLE: frozenset[str] = frozenset()


class _Char(_ctypes._SimpleCData):  # type: ignore[misc]
    _type_ = "c"


class _Buffer(_ctypes.Array):  # type: ignore[misc]
    """256 bytes, passed by address: larger than shm_info, msginfo and seminfo."""

    _type_ = _Char
    _length_ = 256


def _preload() -> None:
    """Import the preload list now, while nothing the program wrote can be on ``sys.path``."""
    global SHADOWABLE
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # not installed here: the child imports it (or fails) as python3 would
            pass
    _load_modules()
    SHADOWABLE = frozenset(n.partition(".")[0] for n in sys.modules) - {n.partition(".")[0] for n in _STARTUP}


def _load_modules() -> None:
    """Run sandboxkit's own modules (the judge's harness) from ``MODULES_FD``: trusted code from the host.

    Run here, like the preload list, before any program exists; a program finds each in
    ``sys.modules`` without compiling or defining anything.
    """
    if MODULES_FD < 0:
        return
    try:
        with open(MODULES_FD, "rb") as f:
            entries = marshal.loads(f.read())
    except Exception:
        return
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", None)
    for name, source, code_magic, bytecode in entries:
        try:
            if bytecode and code_magic == magic:
                code = marshal.loads(bytecode)
            else:
                code = compile(source, "<" + name + ">", "exec", dont_inherit=True, optimize=2)
            module = type(sys)(name)
            module.__dict__["__builtins__"] = builtins
            exec(code, module.__dict__)
            sys.modules[name] = module
        except BaseException:  # an older interpreter, say: programs find no module and carry the code
            sys.modules.pop(name, None)


def _unshadow(directory: str) -> None:
    """Forget preloaded modules that a file in ``directory`` shadows, as ``python3 main.py`` would.

    ``sys.path[0]`` is the script's directory, so a workspace ``json.py`` must win over the
    preloaded ``json``. Costs one ``listdir`` of the (small) workspace.
    """
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        if entry.endswith(".py"):
            name = entry[:-3]
        elif "." not in entry or entry.endswith(".so"):  # a package directory, an extension module
            name = entry.partition(".")[0]
        else:
            continue
        if name in SHADOWABLE:
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[key]


def _frames_below() -> int:
    # Walking f_back makes a frame object per frame: done once in the server, not per child
    # (in a child each would cost copied pages).
    frame, depth = sys._getframe(), 0
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


#: Frames under the program's ``<module>``: the server's module, ``main``, ``_serve_one``,
#: ``_child`` and ``_run_python`` (set in ``main``).
SERVER_FRAMES = 5


def _run_python(path: str, args: list[str], source: bytes | None = None) -> int:
    """Run ``path`` as ``__main__`` the way ``python3 -u path args`` would; return the exit code.

    ``source``: the file's text, when this child has just written it (see ``_write_source``).
    """
    main = type(sys)("__main__")
    main.__dict__.update(__file__=path, __builtins__=builtins, __cached__=None)
    sys.modules["__main__"] = main
    sys.argv = [path, *args]
    directory = os.path.dirname(path)
    sys.path[0] = directory  # the script directory first, as python3 main.py does (see ``main``)
    _unshadow(directory)
    code = 0
    try:
        if source is None:
            with open(path, "rb") as f:
                source = f.read()
        try:
            compiled = compile(source, path, "exec")
        except SyntaxError as exc:
            exc.__traceback__ = None  # raised by compile() here: no frame is the program's
            sys.excepthook(type(exc), exc, None)
            return 1
        exec(compiled, main.__dict__)
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException as exc:
        # Drop this function's frame. excepthook prints ``exc.__traceback__`` (not its argument)
        # since Python 3.11, so the exception itself must carry the shortened traceback.
        tb = exc.__traceback__
        exc.__traceback__ = tb.tb_next if tb is not None else None
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    return _shutdown(code)


def _shutdown(code: int) -> int:
    # What the interpreter does at exit: join non-daemon threads, run atexit, flush.
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return code


#: How a child opens the program's file: never through a link, never waiting on a FIFO.
_SOURCE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_S_IFMT, _S_IFREG = 0o170000, 0o100000


def _write_source(path: str, source: bytes) -> bool:
    """Write the program's file, in the child, as the sandbox's user; False (reported on stderr) if it cannot.

    The host used to write it for every run (five system calls and a chown per run, on the host's
    one event loop); the request already reaches this child, so the child writes it instead. It runs
    inside the sandbox, so no path it follows leads out of it. What a session's earlier program left
    at the name (a link, a FIFO, a directory) is removed first, as the host's write would. Done
    before the rlimits, like the host's write: the file size limit is for the program's files.
    """
    for _ in range(3):
        try:
            fd = os.open(path, _SOURCE_FLAGS, 0o644)
        except OSError:
            _remove(path)
            continue
        try:
            if os.fstat(fd).st_mode & _S_IFMT != _S_IFREG:  # a FIFO with a reader opens
                _remove(path)
                continue
            view = memoryview(source)
            while view:
                view = view[os.write(fd, view) :]
            return True
        except OSError as exc:
            os.write(2, f"cannot write {path}: {exc.strerror}\n".encode())
            return False
        finally:
            os.close(fd)
    os.write(2, f"cannot write {path}: the program keeps replacing it\n".encode())
    return False


def _remove(path: str) -> bool:
    """Remove whatever is at ``path`` (a directory tree by ``fwalk``: no link is followed); whether it is gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        for _, dirs, files, dirfd in os.fwalk(path, topdown=False):
            for name in files + dirs:
                try:
                    os.unlink(name, dir_fd=dirfd)
                except OSError:  # a directory (a link to one is unlinked above)
                    os.rmdir(name, dir_fd=dirfd)
        os.rmdir(path)
    except OSError:
        return False
    return True


def _wipe(mode: int) -> bool:
    """Empty the workspace for a new tenant's first command; whether it is empty now.

    The host's reset leaves this to the server (issue 30: the wipe was a tenth of the host's CPU per
    pooled run): it runs before the command's child exists, after the sweep that ended every process
    of the last tenant, inside the sandbox's own mount namespace, so no path here leads out of it.
    What the sandbox's user cannot remove (a directory a program made unwritable) makes the server
    refuse the command (``unwiped``); the host then wipes as root. ``mode``: the permissions the host
    gave the workspace (a program may have taken its write permission away, and the next tenant's).
    """
    if not WORKSPACE:
        return False
    try:
        os.chmod(WORKSPACE, mode)
        names = os.listdir(WORKSPACE)
    except OSError:
        return False
    gone = True
    for name in names:
        gone = _remove(WORKSPACE + "/" + name) and gone
    return gone


def _read_request(fd: int) -> dict[str, Any]:
    """The command, read by the child only (the server never holds a command's env or argv)."""
    # Never a byte more: what follows the request in the pipe is the program's stdin.
    size = int.from_bytes(read_exactly(fd, 8), "little")
    req: dict[str, Any] = marshal.loads(read_exactly(fd, size))
    return req


def _child(ctl: _socket.socket, fds: list[int]) -> None:
    """In the forked child: read the command, become it. Never returns."""
    code = 127
    try:
        os.setsid()
        os.close(ctl.detach())  # the program must not be able to talk to the host
        # The host makes the pipes non-blocking (its own ends must be); held output pipes get all
        # their flags reset below instead (``_reset_held``: one call each rather than two).
        for fd in fds[:1] if HELD else fds[:3]:
            os.set_blocking(fd, True)
        req = _read_request(fds[0])
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds[:3]:
            if fd > 2:
                os.close(fd)
        if HELD:
            _reset_held()
        source = req.get("source")
        if source is not None and not _write_source(req["python"], source):
            os._exit(1)
        for res, value in req["rlimits"]:
            try:
                resource.setrlimit(res, (value, value))
            except (ValueError, OSError):
                # Only refused when the inherited hard limit is already below ``value``:
                # then the program runs under that stricter limit, never a weaker one.
                pass
        os.chdir(req["cwd"])
        env = req["env"]
        if "python" in req:
            # Every object a child touches costs it a copied page, so the environment is only
            # rebuilt when it differs from the one the server started with (the usual case).
            if env != BASE_ENV:
                os.environ.clear()
                os.environ.update(env)
            code = _run_python(req["python"], req["args"], source)
        else:
            # Python ignores these; an exec'd program must get the defaults back.
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            argv = req["argv"]
            try:
                os.execvpe(argv[0], argv, env)
            except PermissionError as exc:
                os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
                code = 126
            except OSError as exc:
                os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
                code = 127
    except BaseException:
        try:
            sys.excepthook(*sys.exc_info())  # C code: nothing imported (a workspace file could shadow it)
        except BaseException:
            pass
    os._exit(code)


def _reset_held() -> None:
    """Undo what an earlier command did to the held output pipes: they outlive it (see ``HELD``).

    Status flags live in the open file description the server's copy shares: ``O_DIRECT`` would
    packetise the next command's writes, ``O_ASYNC`` signal an old owner. A pipe shrunk to one
    page would slow its output. Done in the child, so the host pays nothing for it.
    """
    fcntl = libc("fcntl")  # resolved by the server before any fork (``main``)
    for fd in (1, 2):
        try:
            fcntl(fd, _F_SETFL, 0)  # blocking again, too
            fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)
        except Exception:  # no libc call here (an image's python3 without ctypes): blocking, at least
            os.set_blocking(fd, True)


def _sweep(sweep_all: bool, pgid: int) -> None:
    """Kill what the command left behind (daemons included) before reporting it finished."""
    if not sweep_all:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
        return
    # kill(-1) reaches every process we may signal except ourselves and the namespace's init:
    # in a PID namespace (or as a uid no other process uses) that is exactly the leftovers.
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        except OSError:
            return
        select.select([], [], [], 0.005)  # let init reap them, then check again


class _SysV:
    """Counts SysV IPC objects with three system calls (reading /proc/sysvipc costs ~5x more)."""

    def __init__(self) -> None:
        self.shmctl, self.msgctl, self.semctl = libc("shmctl"), libc("msgctl"), libc("semctl")
        self.buf = _Buffer()

    def _int(self, index: int) -> int:
        return int.from_bytes(self.buf.raw[4 * index : 4 * index + 4], sys.byteorder, signed=True)

    def any(self) -> bool:
        buf = self.buf
        # shm_info.used_ids, msginfo.msgpool (queues in use, for MSG_INFO), seminfo.semusz (sets in use)
        if self.shmctl(0, _SHM_INFO, buf) >= 0 and self._int(0) > 0:
            return True
        if self.msgctl(0, _MSG_INFO, buf) >= 0 and self._int(0) > 0:
            return True
        return bool(self.semctl(0, 0, _SEM_INFO, buf) >= 0 and self._int(7) > 0)


SYSV: _SysV | None = None
#: What the last ``dirty`` report said: a ``fresh`` command after a dirty one is refused.
LAST_DIRTY = False


def _report(ctl: _socket.socket) -> None:
    global LAST_DIRTY
    LAST_DIRTY = _dirty()
    ctl.send(b"dirty %d" % LAST_DIRTY)


def _dirty() -> bool:
    """Whether a command left files in /tmp, /dev/shm, /dev/mqueue or SysV IPC objects.

    Those outlive the command (they are the server's namespaces, not the workspace), so the
    host restarts the server before an unrelated run. An empty tmpfs or mqueue directory has
    size 40 (two entries of 20): one ``stat`` per directory instead of a listing.
    """
    for path in STATE_DIRS:
        try:
            if os.stat(path).st_size > 40:
                return True
        except OSError:
            pass
    try:
        return SYSV is not None and SYSV.any()
    except Exception:
        return True


def _serve_one(ctl: _socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    """Run one command and report how it ended."""
    if req.get("fresh") and LAST_DIRTY:  # the last tenant's state is still here: not for this one
        for fd in fds:
            os.close(fd)
        ctl.send(b"stale")
        return
    if req.get("wipe") is not None and not _wipe(req["wipe"]):
        for fd in fds:
            os.close(fd)
        ctl.send(b"unwiped")
        return
    held = len(fds) == 1 and bool(HELD)
    if held:
        fds = [fds[0], *HELD]
    elif len(fds) != 3:
        for fd in fds:
            os.close(fd)
        ctl.send(b"exit %d 0" % (127 << 8))
        if PRIVATE:
            _report(ctl)
        return
    pid = os.fork()
    if pid == 0:
        _child(ctl, fds)
    for fd in fds[:1] if held else fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    timed_out = False
    deadline = req["timeout"]
    killed = False
    end = time.monotonic() + deadline
    while True:
        left: float | None = None if killed else end - time.monotonic()
        if left is not None and left <= 0:
            timed_out = killed = True
            _kill_group(pid)
            left = None  # wait for the kill to land; the host's own timer covers a stuck process
        ready, _, _ = select.select([pidfd, ctl.fileno()], [], [], left)
        if pidfd in ready:
            break
        if ctl.fileno() in ready:
            msg = ctl.recv(64)
            if not msg:  # the host went away: take everything down with us
                _kill_group(pid)
                os._exit(0)
            if msg == b"kill" and not killed:
                killed = True
                _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    _sweep(req["sweep"], pid)
    ctl.send(b"exit %d %d" % (status, timed_out))
    if PRIVATE:
        _report(ctl)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _warm_up() -> None:
    """Initialise, once in the server, what every child would otherwise build for itself.

    The first ``compile()`` in a process creates the AST types (a few hundred objects) and
    parser tables; done in each child, that costs ~150 copied pages per run.
    """
    namespace: dict[str, object] = {"__builtins__": builtins}
    exec(compile("def _f(a, *b, **c):\n    return [a, b, c]\n_f(1)\n", "<warm-up>", "exec"), namespace)
    with open(os.devnull, "rb") as f:
        f.read()


def _trim() -> None:
    """Give the allocator's free pages back: a fork copies a page-table entry for every resident page.

    Imports leave much freed memory behind (compiler and unmarshal temporaries); resident but
    free, it would make every fork, and every child's exit, dearer for nothing.
    """
    try:
        libc("malloc_trim")(0)
    except Exception:
        pass


def _recv(ctl: _socket.socket) -> tuple[bytes, list[int]]:
    """One message and the descriptors attached to it (SCM_RIGHTS)."""
    msg, ancdata, _, _ = ctl.recvmsg(MAX_MSG, _socket.CMSG_LEN(4 * 4))
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i : i + 4], sys.byteorder, signed=True) for i in range(0, usable, 4)]
    return msg, fds


def _oom_first() -> None:
    # Sandboxes go before the host when the OOM killer chooses: a trainer run with a negative
    # oom_score_adj (a service manager's -1000, say) made every program unkillable, so a memory bomb
    # spun at its cgroup's limit until its timeout. Raising needs no privilege, but only while this
    # process is still dumpable (its /proc files are its own); children inherit the value.
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"500")
        finally:
            os.close(fd)
    except OSError:
        pass


def main() -> None:
    _oom_first()
    # Children run as the same uid; without this they could ptrace the server or write its
    # /proc/PID/mem and forge results. A non-dumpable process needs CAP_SYS_PTRACE to trace.
    set_dumpable(False)
    ctl = _socket.socket(-1, -1, -1, CTL_FD)  # family/type detected from the descriptor
    global SYSV, SERVER_FRAMES
    SERVER_FRAMES = _frames_below() + 3  # main's depth, then _serve_one, _child, _run_python
    if PRIVATE:
        SYSV = _SysV()
    libc("fcntl")  # looked up once here, not in every child (see ``_reset_held``)
    _preload()
    _warm_up()
    # Move everything alive now out of the collector's reach: a child's GC then never
    # touches (and copies) the server's pages, which keeps forks cheap.
    # Both are the child's, set here once so no child writes (and copies) the pages they live on:
    # the server's own frames sit below the program's, so it gets the recursion depth it would
    # have had; and sys.path gets a first entry the child points at the script directory (what
    # isolated mode leaves out). Nothing is imported after this, and ``/proc/0`` can never exist.
    sys.setrecursionlimit(sys.getrecursionlimit() + SERVER_FRAMES)
    sys.path.insert(0, "/proc/0")
    gc.collect()
    gc.freeze()
    _trim()
    ctl.send(b"ready")
    while True:
        try:
            msg, fds = _recv(ctl)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        if msg == b"pipes" and len(fds) == 2 and not HELD:
            HELD.extend(fds)
            continue
        if msg in (b"kill", b"pipes"):  # a late kill for a command that already ended; a second pair
            for fd in fds:
                os.close(fd)
            continue
        _serve_one(ctl, marshal.loads(msg), fds)


if __name__ == "__main__":
    main()
