"""The fork server: the one long-lived process inside a sandbox. Runs with ``python3 -u -c``.

It is started once per sandbox, inside the sandbox's namespaces and as the sandbox's user,
and forks one child per command, so a command pays neither interpreter start-up nor
namespace set-up. Python programs run in the forked child directly (no ``exec``); every
other command is ``exec``'d by the child.

Why children do not share state: the server never runs user code and never reads it (a
child reads ``main.py`` from disk after the fork), so every child starts from the same
pristine interpreter, and whatever a child imports or changes dies with it.

This file must stay standalone (stdlib only, no sandboxkit import): the host passes its
source text to the sandbox's own ``python3``, which cannot see sandboxkit's installation.

Protocol on the control socket (``SOCK_SEQPACKET``, one message per datagram):
    host -> server: ``marshal`` dict {"argv"|"python", "cwd", "env", "timeout", "rlimits", "sweep"}
                    with three descriptors attached (stdin read end, stdout and stderr write ends);
                    or ``b"kill"`` while a command runs (output cap reached).
    server -> host: ``b"ready"`` once at start; ``b"exit <waitstatus> <timed_out>"`` after each command.
"""

from __future__ import annotations

import _socket  # not ``socket``: that module pulls in enum/selectors, ~1 MB per sandbox
import atexit
import builtins
import gc
import marshal
import os
import resource
import select
import signal
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing would cost every sandbox memory
if TYPE_CHECKING:
    from typing import Any

CTL_FD = int(sys.argv[1])
os.environ.pop("PWD", None)  # set by bwrap --chdir; programs get exactly the environment the host sent
BASE_ENV = dict(os.environ)
MAX_MSG = 1 << 20


def _no_ptrace() -> None:
    # Children run as the same uid; without this they could ptrace the server or write its
    # /proc/PID/mem and forge results. A non-dumpable process needs CAP_SYS_PTRACE to trace.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _run_python(path: str, args: list[str]) -> int:
    """Run ``path`` as ``__main__`` the way ``python3 -u path args`` would; return the exit code."""
    main = type(sys)("__main__")
    main.__dict__.update(__file__=path, __builtins__=builtins, __cached__=None)
    sys.modules["__main__"] = main
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(path)
    code = 0
    try:
        with open(path, "rb") as f:
            source = f.read()
        try:
            compiled = compile(source, path, "exec")
        except SyntaxError as exc:
            sys.excepthook(type(exc), exc, None)
            return 1
        exec(compiled, main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:
        tb = exc.__traceback__
        sys.excepthook(type(exc), exc, tb.tb_next if tb is not None else None)  # hide this frame
        code = 1
    return _shutdown(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    try:
        print(value, file=sys.stderr)
    except Exception:
        pass
    return 1


def _shutdown(code: int) -> int:
    # What the interpreter does at exit: join non-daemon threads, run atexit, flush.
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return code


def _child(ctl: _socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the command. Never returns."""
    code = 127
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.close(ctl.detach())  # the program must not be able to talk to the host
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
            code = _run_python(req["python"], req["args"])
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
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
    os._exit(code)


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


def _serve_one(ctl: _socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    pid = os.fork()
    if pid == 0:
        _child(ctl, req, fds)
    for fd in fds:
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


def _recv(ctl: _socket.socket) -> tuple[bytes, list[int]]:
    """One message and the descriptors attached to it (SCM_RIGHTS)."""
    msg, ancdata, _, _ = ctl.recvmsg(MAX_MSG, _socket.CMSG_LEN(3 * 4))
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i : i + 4], sys.byteorder, signed=True) for i in range(0, usable, 4)]
    return msg, fds


def main() -> None:
    _no_ptrace()
    ctl = _socket.socket(-1, -1, -1, CTL_FD)  # family/type detected from the descriptor
    _warm_up()
    # Move everything alive now out of the collector's reach: a child's GC then never
    # touches (and copies) the server's pages, which keeps forks cheap.
    gc.collect()
    gc.freeze()
    ctl.send(b"ready")
    while True:
        try:
            msg, fds = _recv(ctl)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        if msg == b"kill":  # a late kill for a command that already ended
            for fd in fds:
                os.close(fd)
            continue
        _serve_one(ctl, marshal.loads(msg), fds)


if __name__ == "__main__":
    main()
