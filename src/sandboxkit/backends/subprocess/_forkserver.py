"""Host side of a sandbox's fork server (see ``_server_main`` for the side inside the sandbox).

One server per sandbox, started inside the sandbox's namespaces as its uid. Each command is
a small ``marshal`` message plus three pipe descriptors passed with ``SCM_RIGHTS`` (or the stdin
pipe alone, where the server holds one output pair for its life: ``hold_pipes``); the host
drains the pipes itself, so output capping works exactly as on the cold path.

The host keeps its own timer (``timeout + GRACE_S``): if the server does not report in
time, or dies (a program may kill it: it is its parent), the whole sandbox is killed. A
server that died on its own (``died``) is never replaced inside the same workspace: the
program that killed it controlled that workspace, so the sandbox is discarded instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import marshal
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sandboxkit._standalone import standalone_source
from sandboxkit.backends.subprocess._cgroup import SandboxCgroup
from sandboxkit.backends.subprocess._output import Drain, OutputLimits
from sandboxkit.backends.subprocess._status import Outcome
from sandboxkit.backends.subprocess._watch import Watcher

__all__ = ["GRACE_S", "ForkServer", "ServerLost", "ServerStale", "ServerStartError", "ServerUnwiped"]

#: The host's own deadline is the command's timeout plus this (the server enforces the timeout).
GRACE_S = 0.5
#: After the server reports the exit, how long pipes may stay open (should be instant: the
#: server has killed every other process of the sandbox by then).
EOF_GRACE_S = 0.25
START_TIMEOUT_S = 15.0
#: Largest command message (argv + env): far above any real command, a bound on what a child reads.
MAX_MESSAGE = 1 << 20
_PIPE_FLAGS = os.O_NONBLOCK | os.O_CLOEXEC
#: ``socket``'s flags are ``IntFlag`` members, whose ``|`` runs in Python: combined once, here.
_PEEK_NOW = int(socket.MSG_DONTWAIT | socket.MSG_PEEK)
log = logging.getLogger(__name__)
SERVER_SOURCE = standalone_source(Path(__file__).with_name("_server_main.py"))


class ServerStartError(RuntimeError):
    """The fork server did not come up (the message says why, from its stderr)."""


class ServerLost(ConnectionError):
    """A new tenant's first command found the server dead before the server took it: nothing ran."""


class ServerStale(Exception):
    """A new tenant's first command was refused: the last tenant left state (the server is killed)."""


class ServerUnwiped(Exception):
    """A command that was to run in an emptied workspace was refused: the server could not empty it (killed)."""


class ForkServer:
    """One sandbox's fork server process tree and its control socket.

    Args:
        python: interpreter inside the sandbox.
        prefix: argv that wraps the server in its namespaces (bwrap ...), or ``[]``.
        user: host ``(uid, gid)`` to run as, or ``None`` to stay the current user.
        env: the server's environment (already scrubbed).
        cwd: where it starts (the workspace).
        cgroup: the sandbox's cgroup, which the server tree joins before its first command.
        sweep_all: after each command, kill every other process the server may signal
            (true inside a PID namespace or under a private uid); otherwise the process group.
        preload: modules the server imports before its first command (see ``_server_main``).
        private_state: ``/tmp``, ``/dev/shm``, ``/dev/mqueue`` and SysV IPC are the sandbox's own,
            so the server reports when a command leaves something there (``dirty``).
        pass_fds: descriptors ``prefix`` refers to (bwrap's ``--seccomp FD``); closed here after start.
        modules: sandboxkit's own modules the server runs at start, name -> (source, bytecode of
            this interpreter or ``b""``) (see ``SubprocessBackend.preload_python_module``).
        workspace: the workspace's path inside the sandbox, which a command's ``wipe`` empties
            (``None``: the server never wipes; see ``_server_main._wipe``).
        hold_pipes: give the server one pair of output pipes for its whole life instead of a new
            pair per command (two pipes, four closes and four watch changes less per run). Only
            where the sweep after each command reaches every process that could hold a write end
            and nothing outside can be handed one: a PID namespace of its own and no network
            (``_server_main.HELD``). Output that arrives with no command running kills the server.
    """

    def __init__(
        self,
        *,
        python: str,
        prefix: Sequence[str],
        user: tuple[int, int] | None,
        env: Mapping[str, str],
        cwd: str,
        cgroup: SandboxCgroup | None,
        sweep_all: bool,
        preload: Sequence[str] = (),
        private_state: bool = False,
        pass_fds: Sequence[int] = (),
        modules: Mapping[str, tuple[str, bytes]] | None = None,
        hold_pipes: bool = False,
        workspace: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.python = python
        self.hold_pipes = hold_pipes
        #: The held output pipes' read ends (``hold_pipes``), and the command reading them now.
        self._held: tuple[int, int] | None = None
        self._drain: Drain | None = None
        #: Who takes the server's next message (a command's or ``settle``'s wait), or None: then it can
        #: only be the state report, taken as it comes (see ``_socket_readable``).
        self._waiter: Callable[[bytes], None] | None = None
        #: The cgroup's OOM kill count after this server's last command, while nothing else has run
        #: in the sandbox since (``None``: unknown; see ``oom_unknown``). The next command's "before".
        self._oom_seen: int | None = None
        #: The modules this server was started with (a sandbox restarts it when the backend has more).
        self.modules = dict(modules or {})
        self.preload = ",".join(preload)
        self.private_state = private_state
        self.pass_fds = list(pass_fds)
        #: A command left state outside the workspace (files in /tmp, IPC objects): restart before reuse.
        self.dirty = False
        #: The server died on its own (a program killed it): never start another in this workspace.
        self.died = False
        #: The server's ``dirty`` report on the last command is still unread (see ``settle``).
        self._report_pending = False
        self.prefix = list(prefix)
        self.user = user
        self.env = dict(env)
        self.cwd = cwd
        self.cgroup = cgroup
        self.sweep_all = sweep_all
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.server_pid: int | None = None
        #: Its socket's and its commands' pipes' readiness, on the loop as one reader (see ``_watch``).
        self._watcher: Watcher | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the server and wait until it is ready (and inside the sandbox's cgroup).

        Raises:
            ServerStartError: it exited or did not answer within ``START_TIMEOUT_S``.
        """
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        uid, gid = self.user if self.user is not None else (None, None)
        # -I: no current directory (the workspace) or user site on sys.path, no PYTHON* variables.
        argv = [self.python, "-I", "-u", "-c", SERVER_SOURCE, str(child.fileno()), self.preload]
        argv.append("1" if self.private_state else "0")
        modules_fd = self._modules_fd()
        argv.append(str(modules_fd) if modules_fd is not None else "-")
        argv.append(self.workspace or "-")
        if modules_fd is not None:
            self.pass_fds.append(modules_fd)
        try:
            self.proc = subprocess.Popen(
                [*self.prefix, *argv],
                pass_fds=[child.fileno(), *self.pass_fds],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
                user=uid,
                group=gid,
                extra_groups=[] if uid is not None else None,
                start_new_session=True,
            )
        except OSError as exc:
            host.close()
            raise ServerStartError(f"cannot start {self.prefix[:1] or [self.python]}: {exc}") from exc
        finally:
            child.close()
            for fd in self.pass_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.pass_fds = []
        self.sock = host
        try:
            msg, pid = await self._recv(time.monotonic() + START_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as exc:
            err = self._stderr_text()
            self.kill()
            raise ServerStartError(f"the fork server did not start: {err or exc}") from None
        except BaseException:  # cancelled (a closing pool's warm-up): nothing half-started stays
            self.kill()
            raise
        assert self.proc.stderr is not None
        self.proc.stderr.close()  # from now on the server never writes to its own stderr
        if msg != b"ready" or pid is None:
            self.kill()
            raise ServerStartError(f"the fork server answered {msg!r} instead of b'ready'")
        self.server_pid = pid
        # Watched for the server's life, not per command: two ``epoll_ctl`` calls less per run.
        self._watcher_now(asyncio.get_running_loop()).add(host.fileno(), self._socket_readable)
        if self.hold_pipes:
            self._give_pipes()
        if self.cgroup is not None:
            # Nothing but bwrap and the server exists yet, so moving these is race-free. Only
            # processes of the sandbox's own tree: never this process (the server's parent
            # when there is no bwrap).
            tree = [self.proc.pid, pid]
            init = _ppid(pid)
            if init is not None and init != os.getpid() and _ppid(init) == self.proc.pid:
                tree.insert(1, init)
            for p in dict.fromkeys(tree):
                self.cgroup.add(p)

    def _give_pipes(self) -> None:
        """Send the server the output pipes it gives every command, and watch their read ends.

        Raises:
            ServerStartError: the server is gone already.
        """
        assert self.sock is not None
        out_r, out_w = os.pipe2(_PIPE_FLAGS)
        err_r, err_w = os.pipe2(_PIPE_FLAGS)
        try:
            socket.send_fds(self.sock, [b"pipes"], [out_w, err_w])
        except OSError as exc:
            os.close(out_r)
            os.close(err_r)
            self.kill()
            raise ServerStartError(f"the fork server did not take its pipes: {exc}") from None
        finally:
            os.close(out_w)
            os.close(err_w)
        self._held = (out_r, err_r)
        watcher = self._watcher_now(asyncio.get_running_loop())
        watcher.add(out_r, self._stdout_readable)
        watcher.add(err_r, self._stderr_readable)

    def _stdout_readable(self) -> None:
        self._held_readable(0)

    def _stderr_readable(self) -> None:
        self._held_readable(1)

    def _held_readable(self, index: int) -> None:
        drain = self._drain
        if drain is not None:
            drain.readable(index)
            return
        # Nothing runs, yet something wrote (or the server died: EOF). Every process of the
        # sandbox was killed before the last exit report, so the isolation did not hold: end it.
        if self.alive:
            log.warning("a fork server's output pipes were written with no command running; killing it")
        self.kill()

    def _close_held(self) -> None:
        held, self._held = self._held, None
        self._drain = None
        if held is None:
            return
        for fd in held:
            if self._watcher is not None:
                self._watcher.remove(fd)
            os.close(fd)

    def _unwatch_socket(self) -> None:
        if self._watcher is not None and self.sock is not None:
            self._watcher.remove(self.sock.fileno())

    def _socket_readable(self) -> None:
        """A message from the server: to whoever waits for one, or else the state report on the last command.

        Anything else with nobody waiting (the server closed its end, or spoke out of turn) means
        the server is not to be trusted with another command: it counts as dead on its own. A
        command still reading its output keeps the pipes until it is done; the socket is let go.
        """
        sock = self.sock
        if sock is None:
            return
        try:
            msg = sock.recv(256, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            msg = b""
        waiter = self._waiter
        if waiter is not None:
            waiter(msg)
            return
        if self._report_pending and msg.startswith(b"dirty "):
            self._report_pending = False
            self._take_report(msg)
            return
        self.died = True
        self._unwatch_socket()
        if self._drain is None:
            self.kill()

    def _modules_fd(self) -> int | None:
        """A memory file holding the modules for the server to run at start, or None when there are none.

        A file, not argv (a module is ~100 KB: ``MAX_ARG_STRLEN`` is 128 KiB) nor a pipe (it would fill
        before the server reads it). The server reads it to the end and closes it before serving.
        """
        if not self.modules:
            return None
        magic = importlib.util.MAGIC_NUMBER
        payload = marshal.dumps([(name, source, magic, code) for name, (source, code) in self.modules.items()])
        fd = os.memfd_create("sandboxkit-modules", 0)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _stderr_text(self) -> str:
        if self.proc is None or self.proc.stderr is None or self.proc.stderr.closed:
            return ""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(2)
            return self.proc.stderr.read(4096).decode(errors="replace").strip()
        return ""

    def kill(self) -> None:
        """Kill the server and everything in the sandbox. Idempotent, synchronous, quick."""
        proc, self.proc = self.proc, None
        self._close_held()
        self._unwatch_socket()
        self._waiter = None
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap's init dies with it, and the PID namespace with that
        if self.cgroup is not None:
            self.cgroup.kill_all()
        elif self.sweep_all and not self.prefix and self.user is not None:
            kill_uid(self.user[0])
        with contextlib.suppress(subprocess.SubprocessError):
            proc.wait(5)
        if self.server_pid is not None:
            _wait_gone(self.server_pid)
        if proc.stderr is not None and not proc.stderr.closed:
            proc.stderr.close()

    # ------------------------------------------------------------------ messages

    async def _recv(self, deadline: float) -> tuple[bytes, int | None]:
        """Next message from the server and the sender's host pid (from SCM_CREDENTIALS)."""
        sock = self.sock
        if sock is None:
            raise ConnectionError("fork server closed")
        loop = asyncio.get_running_loop()
        while True:
            try:
                msg, anc, _, _ = sock.recvmsg(256, socket.CMSG_SPACE(12), socket.MSG_DONTWAIT)
            except BlockingIOError:
                ready: asyncio.Future[None] = loop.create_future()
                loop.add_reader(sock.fileno(), _set_done, ready)
                try:
                    await asyncio.wait_for(ready, max(deadline - time.monotonic(), 0.0))
                except asyncio.TimeoutError:
                    raise TimeoutError("fork server did not answer in time") from None
                finally:
                    loop.remove_reader(sock.fileno())
                continue
            if not msg:
                raise ConnectionError("fork server exited")
            pid = None
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", data[:12])[0]
            return msg, pid

    async def _reply(
        self,
        timeout_s: float,
        watcher: Watcher | None = None,
        *,
        report: list[bytes] | None = None,
        fresh: bool = False,
    ) -> bytes | None:
        """The server's next message; ``b""`` if it died, ``None`` if ``timeout_s`` passed first.

        One timer, and the socket's watch that lasts the server's life (``_socket_readable``),
        rather than ``wait_for``: this runs once per command, and the warm path's budget is about
        a millisecond.

        ``report``: the server's state report on the last command is due first. A first message
        that is a report goes into the list and the wait goes on, under the same timer, for the
        command's own reply (one timer per command, not two); a ``fresh`` command's wait ends at
        a dirty report (the server refuses the command). An exit report makes the state report
        on this command due next: taken as it comes, with nobody waiting.
        """
        if watcher is None:
            watcher = self._watcher_now(asyncio.get_running_loop())
        loop = watcher.loop
        done: asyncio.Future[bytes | None] = loop.create_future()

        def message(msg: bytes) -> None:
            if report is not None and not report and msg.startswith(b"dirty "):
                report.append(msg)
                if not (fresh and msg == b"dirty 1"):
                    return
            elif msg.startswith(b"exit "):
                self._report_pending = self.private_state
            self._waiter = None
            done.set_result(msg)

        def expired() -> None:
            if not done.done():
                self._waiter = None
                done.set_result(None)

        self._waiter = message
        timer = loop.call_later(timeout_s, expired)
        try:
            return await done
        finally:
            timer.cancel()
            if self._waiter is message:
                self._waiter = None

    def _watcher_now(self, loop: asyncio.AbstractEventLoop) -> Watcher:
        if self._watcher is None:
            self._watcher = Watcher()
        self._watcher.attach(loop)
        return self._watcher

    def take_report(self) -> bool:
        """Take the server's state report on the last command if it is already here (no wait).

        Returns whether no report is pending any more (``False``: the server is still checking).
        A reset calls this rather than ``settle``, so that the pooled path does not wait for the
        check; the sandbox then makes its next command ``settle`` before it sends anything.
        """
        if not self._report_pending:
            return True
        sock = self.sock
        if sock is None or not self.alive:
            self._report_pending = False
            self.dirty = True
            return True
        try:
            reply: bytes | None = sock.recv(256, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            reply = b""
        self._report_pending = False
        self._take_report(reply)
        return True

    def gone(self) -> bool:
        """Whether the server is dead or closed its end, seen without waiting (no report pending).

        Asked before the first command of a new tenant sends anything, so that a server that died
        between tenants is never taken for one that died during that tenant's command. A message
        nobody asked for counts as gone, too (the server is then killed).
        """
        sock = self.sock
        if sock is None or not self.alive:
            return True
        return self._closed_or_talking(sock)

    def _closed_or_talking(self, sock: socket.socket) -> bool:
        """``gone`` for a server already seen alive: its socket closed, or it sent unasked (killed)."""
        try:
            peek = sock.recv(1, _PEEK_NOW)
        except BlockingIOError:
            return False
        except OSError:
            peek = b""
        if peek:
            self.kill()
        return True

    async def settle(self) -> None:
        """Collect the server's state report on the last command (``dirty``), if still unread.

        The server sends it right after the exit report, so it checks while the host is busy
        with the result and the report is usually waiting here already (one ``recv``). Called
        before a reset, for a server found dead, and before the first command after a reset that
        did not wait (see ``take_report``); the next command of a live server of the same tenant
        reads the report itself, ahead of its own exit (see ``run``). A server that does not
        report in time is killed (restarted by the next command: it was not the program's doing
        that we know of); one that died is ``died``.
        """
        if self.take_report():
            return
        self._report_pending = False
        try:
            reply = await self._reply(START_TIMEOUT_S)
        except BaseException:  # cancelled: a late report would be taken for the next command's
            self.kill()
            raise
        self._take_report(reply)

    def _take_report(self, reply: bytes | None) -> None:
        if reply is None or not reply.startswith(b"dirty "):
            self.dirty = True
            if reply == b"":
                self.died = True
            self.kill()
        elif reply == b"dirty 1":
            self.dirty = True

    def oom_unknown(self) -> None:
        """Something other than this server's commands runs in the sandbox (a kernel): the next
        command reads the OOM kill count before it starts, rather than trusting the last one's."""
        self._oom_seen = None

    def _send_kill(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.send(b"kill", socket.MSG_DONTWAIT)

    # ------------------------------------------------------------------ commands

    async def run(
        self,
        request: dict[str, object],
        *,
        stdin: bytes,
        timeout_s: float,
        output: OutputLimits,
        fresh: bool = False,
        alive_known: bool = False,
        wipe: int | None = None,
    ) -> Outcome:
        """Run one command (``request``: the child's part of the protocol, see ``_server_main``).

        ``alive_known``: the caller has just seen the server alive, with no pause since (one
        ``waitpid`` less; a server dead since then is seen by this command anyway, when its socket
        turns out closed). ``fresh``: the first command of a new tenant, after a reset that did not wait for the
        state report. The server refuses it after a dirty report (``ServerStale``), so the last
        tenant's state never reaches it, and a server found dead before it took the command is
        ``ServerLost`` (never this command's doing). ``wipe``: the server empties the workspace,
        with these permissions, before it runs the command (the last tenant's files, left by the
        host's reset); ``None``: it does not.

        Raises:
            ServerLost: ``fresh``, and the server died before it took the command.
            ServerStale: ``fresh``, and the last command left state; the server is killed.
            ServerUnwiped: ``wipe``, and the server could not empty the workspace; the server is killed.
            ConnectionError: the server is not running (``died`` says whether it died on its own).
            ValueError: the request is too large to send.
        """
        sock = self.sock
        if sock is None or not (alive_known or self.alive):
            if fresh:
                self.died = True
                raise ServerLost("fork server is gone")
            raise ConnectionError("fork server is not running")
        lost = ServerLost if fresh else ConnectionError
        watcher = self._watcher_now(asyncio.get_running_loop())  # the server is alive: not closing
        if self._held is not None:
            # Bytes in the held pipes now were written with no command running (the loop may not
            # have looked since): they kill the server here, and never become this command's output.
            # A state report already here is taken on the way (``_socket_readable``).
            watcher.dispatch()
            if self.sock is None:
                self.died = True
                raise lost("fork server is gone")
            if fresh and self.dirty:
                self.kill()
                raise ServerStale("the last command left state")
        # The server's state report on the last command, if unread, comes before this command's
        # exit: the server sends it, then takes this command (already waiting, no wake-up).
        report_first, self._report_pending = self._report_pending, False
        if report_first:  # already here (often): take it now, not through one more loop round
            try:
                early = sock.recv(256, socket.MSG_DONTWAIT)
            except BlockingIOError:
                early = None
            except OSError:
                early = b""
            if early is not None and early.startswith(b"dirty "):
                self.dirty = self.dirty or early == b"dirty 1"
                report_first = False
                if fresh and self.dirty:
                    self.kill()
                    raise ServerStale("the last command left state")
            elif early is not None:  # gone, or nonsense: not this command's doing
                self.died = early == b"" or fresh
                self.kill()
                raise lost("fork server is gone")
        elif fresh and self._closed_or_talking(sock):  # died since the last report: not this command's doing
            self.died = True
            self.kill()
            raise ServerLost("fork server is gone")
        body = marshal.dumps(request)
        if len(body) > MAX_MESSAGE:
            raise ValueError(f"command, environment and arguments take {len(body)} bytes; the limit is {MAX_MESSAGE}")
        # Between two commands only the idle server lives in the cgroup, unless the sandbox said
        # otherwise: the last command's count is this one's "before" (one file read less per run).
        oom_before = self._oom_seen
        if oom_before is None:
            oom_before = self.cgroup.oom_kills() if self.cgroup is not None else 0
        self._oom_seen = None  # until this command has reported
        header = marshal.dumps({"timeout": timeout_s, "sweep": self.sweep_all, "fresh": fresh, "wipe": wipe})
        # Non-blocking from the start, both ends (the child makes its own ends blocking): three
        # ``set_blocking`` calls less here (an ``ioctl`` each) per command.
        held = self._held
        in_r, in_w = os.pipe2(_PIPE_FLAGS)
        if held is None:
            out_r, out_w = os.pipe2(_PIPE_FLAGS)
            err_r, err_w = os.pipe2(_PIPE_FLAGS)
            theirs = [in_r, out_w, err_w]
            ours = [in_w, out_r, err_r]
        else:
            (out_r, err_r), theirs, ours = held, [in_r], [in_w]
        # The child's part rides ahead of stdin (see ``_server_main``). Written before the server
        # hears of the command, it is in the pipe when the child looks: written after, a child
        # forked on the other CPU while this process was preempted by the server's wake-up
        # would block on the empty pipe and need one more wake-up. A request larger than the
        # pipe goes on with stdin in the loop.
        prefix = len(body).to_bytes(8, "little") + body
        try:
            written = os.write(in_w, prefix)
        except OSError:
            written = 0
        started = time.perf_counter()
        try:
            socket.send_fds(sock, [header], theirs)
        except OSError:
            for fd in ours:
                os.close(fd)
            self.died = True
            self.kill()
            raise ConnectionError("fork server is gone") from None
        finally:
            for fd in theirs:
                os.close(fd)
        feed = stdin if written == len(prefix) else prefix[written:] + stdin
        drain = Drain(
            out_r, err_r, in_w, feed, output, self._send_kill, watcher, nonblocking=True, held=held is not None
        )
        if held is not None:
            self._drain = drain
        status: int | None = None
        timed_out = crashed = False
        try:
            report: list[bytes] | None = [] if report_first else None
            reply = await self._reply(timeout_s + GRACE_S, watcher, report=report, fresh=fresh)
            if report:  # the state report came first, then (unless refused) this command's reply
                self.dirty = self.dirty or report[0] == b"dirty 1"
                if fresh and self.dirty:  # the server refuses this command (b"stale"): not run
                    raise ServerStale("the last command left state")
            elif report_first and reply == b"":  # died before this command began: not the command's doing
                self.died = True
                raise lost("fork server is gone")
            elif fresh and report_first and reply is None:  # no report, so it never took this command
                raise ServerLost("fork server did not report in time")
            elif report_first and reply is not None:  # not the report: nonsense
                reply = b""
            if reply == b"stale":
                raise ServerStale("the server refused a fresh command")
            if reply == b"unwiped":
                raise ServerUnwiped("the server could not empty the workspace")
        except BaseException:  # cancelled mid-command, or gone: a late reply would confuse the next one
            self.kill()
            drain.close()
            raise
        if reply is None:  # the server did not report in time (stopped, starved): the host's own timeout
            timed_out = crashed = True
        elif reply.startswith(b"exit "):
            _, raw_status, raw_timeout = reply.split()
            status, timed_out = int(raw_status), raw_timeout == b"1"
        else:  # b"": the server died (a program may kill its parent) or answered nonsense
            crashed = self.died = True
        if held is not None:
            self._end_held(drain, crashed)
        else:
            if crashed:
                self.kill()  # also ends every writer of the pipes
            try:
                # Every writer of the pipes is dead once the server reports (or is killed): their last
                # bytes and EOF are there already, read without a timer in the common case.
                if not drain.read_now() and not await drain.wait_eof(EOF_GRACE_S if not crashed else 1.0):
                    drain.close()
            finally:
                drain.close()
        code = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
        oom = False
        if self.cgroup is not None:
            oom_after = self.cgroup.oom_kills()
            oom = oom_after > oom_before
            if not crashed:
                self._oom_seen = oom_after
        return drain.outcome(code, time.perf_counter() - started, timed_out=timed_out, oom_killed=oom)

    def _end_held(self, drain: Drain, crashed: bool) -> None:
        """Take a command's last output from the held pipes, and stop routing them to it.

        Reported: every process that could write was killed before the report, so what they wrote
        is in the pipes now and read until empty. Crashed (no report in time, or the server died):
        what is there is read, then the server is killed, which closes the pipes.
        """
        try:
            if not drain.read_now() and not crashed:
                log.warning("a fork server's output pipes kept filling after the command ended; killing it")
                crashed = True
        finally:
            self._drain = None
            drain.close()
            if crashed:
                self.kill()


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wait_gone(pid: int, wait_s: float = 2.0) -> None:
    """Wait until ``pid`` has exited (gone or a zombie): its namespace dies a moment after bwrap."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.002)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def kill_uid(uid: int) -> None:
    """SIGKILL every process of host uid ``uid`` (a sandbox's private uid; needs root)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=uid, group=uid, extra_groups=[], timeout=5, check=False)
