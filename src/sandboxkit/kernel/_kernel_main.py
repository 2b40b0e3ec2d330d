"""The in-sandbox side of a stateful Python kernel. Runs as ``python3 -I -u -c SOURCE ARGS``.

Two processes, so that a hostile cell can never take the kernel's machinery down with it:

* the **supervisor** (this program's first process) never runs user code. It is a child
  subreaper, so every process a cell starts stays below it, whatever that process does
  (``setsid``, double fork). It reads framed requests from the host on stdin, forwards each
  cell to the worker, drains the worker's stdout and stderr (head + tail, like every other
  sandboxkit output), enforces the cell's timeout, and kills the whole process tree when the
  cell times out or the worker dies (``os._exit``, the OOM killer, a segfault).
* the **worker**, forked from the supervisor (a fresh one costs a fork, not an interpreter
  start), runs cells in one persistent ``__main__`` namespace.

This file must stay standalone (stdlib only): the host passes its source text to the sandbox's own
``python3``, which cannot see sandboxkit's installation. Its one sandboxkit import, of the helpers
every in-sandbox program shares, is replaced by their definitions when the text is shipped
(:func:`sandboxkit._standalone.standalone_source`).

Command line: one JSON object ``{"rlimits": [[resource, value], ...], "cap": bytes kept per
stream, "head": head fraction, "stop": bytes after which a cell is interrupted, "shell": "auto" or
"python"}``.

Two ways to run a cell, the same everywhere else:

* **IPython** (``shell: "auto"`` where the sandbox's Python has IPython): the worker runs each
  cell through IPython's own ``InteractiveShell.run_cell``, as a Jupyter kernel does, so magics
  (``%time``), shell escapes (``!echo``, run by the sandbox's ``/bin/sh`` like any subprocess),
  ``display()``, a trailing ``;`` and top-level ``await`` behave as in Sandbox Fusion's ipykernel.
  Rich outputs (``display()`` calls and the cell's value) come back as MIME bundles. The shell keeps
  no history file (an in-memory one) and its profile directory is a private temporary directory
  of the sandbox, made at start and removed at exit: nothing of it is shared, and nothing is read
  from a home directory.
* **plain Python** (``shell: "python"``, or IPython absent): ``exec`` of the cell, the value of its
  last expression shown as ``{"text/plain": repr}``.

Protocol (host <-> supervisor on stdin/stdout; supervisor <-> worker on two private pipes):
every message is a 4-byte big-endian length and a UTF-8 JSON object.
    host -> supervisor: ``{"op": "cell", "code", "timeout", "fresh"}`` or ``{"op": "ping"}``.
    supervisor -> host: ``{"ready": true, "shell"}`` once at start; after each cell ``{"status",
                        "stdout", "stderr", "value", "display", "error_name", "error_value",
                        "traceback", "truncated", "restarted", "state_lost", "duration_s", "shell"}``;
                        ``{"pong": true}`` for a ping.
    A closed stdin (the host went away) kills every process of the kernel.
"""

from __future__ import annotations

import builtins
import json
import os
import select
import signal
import sys
import time

from sandboxkit._in_sandbox_std import HeadTail, cut_head_tail, prctl, read_exactly, set_dumpable

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every kernel memory
if TYPE_CHECKING:
    from typing import Any

ARGS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
CAP = int(ARGS.get("cap", 1 << 20))
HEAD = float(ARGS.get("head", 0.5))
STOP = int(ARGS.get("stop", 64 << 20))
RLIMITS = [(int(r), int(v)) for r, v in ARGS.get("rlimits", [])]
#: "auto": IPython where it can be imported (see ``load_ipython``), else plain Python; "python": plain.
SHELL_WANTED = str(ARGS.get("shell", "auto"))
#: After an output flood's SIGINT, how long the worker gets to stop before it is killed.
INTERRUPT_GRACE_S = 1.0
#: How long killing a process tree may take before giving up (a fork bomb racing the kill).
KILL_WAIT_S = 3.0
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


# ---------------------------------------------------------------------- framing


def read_frame(fd: int) -> dict[str, Any] | None:
    """Next message on ``fd``; None at end of file."""
    try:
        body = read_exactly(fd, int.from_bytes(read_exactly(fd, 4), "big"))
    except EOFError:
        return None
    msg: dict[str, Any] = json.loads(body)
    return msg


def write_frame(fd: int, msg: dict[str, Any]) -> None:
    body = json.dumps(msg).encode()
    data = len(body).to_bytes(4, "big") + body
    while data:
        data = data[os.write(fd, data) :]


# ---------------------------------------------------------------------- output


def cut(data: bytes, cap: int = CAP) -> tuple[bytes, bool]:
    """Head + marker + tail of ``data`` when longer than ``cap`` (the cut of sandboxkit.output)."""
    return cut_head_tail(data, cap, HEAD)


class Stream(HeadTail):
    """One output stream of a cell: its head and tail (``CAP`` bytes), and how many bytes it wrote in all."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(CAP, HEAD)

    def text(self) -> tuple[str, bool]:
        return self.value().decode("utf-8", "replace"), self.truncated


# ---------------------------------------------------------------------- the worker


def _cell_name(number: int) -> str:
    return f"<cell {number}>"


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the cell's first frame down: the kernel's own frames are not the user's."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
        tb = tb.tb_next
    exc.__traceback__ = tb
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _text(value: str) -> tuple[str, bool]:
    data, truncated = cut(value.encode("utf-8", "replace"))
    return data.decode("utf-8", "replace"), truncated


class Outputs:
    """The rich outputs of one cell in order (``display()`` calls and the cell's value), as MIME bundles.

    A bundle maps a MIME type to its data, as a Jupyter ``display_data`` / ``execute_result``
    carries it: text as str, binary data (``image/png``) as base64, JSON as JSON. All of a cell's
    bundles together keep within ``CAP`` bytes of JSON, like each output stream: a bundle that
    does not fit keeps only its ``text/plain``, cut to head + tail, and ``truncated`` says so (a
    cut image would be garbage, not a smaller image).
    """

    def __init__(self) -> None:
        self.bundles: list[dict[str, Any]] = []
        self.room = CAP
        self.truncated = False
        self.value: str | None = None

    def add(self, data: dict[str, Any]) -> None:
        import base64

        bundle = {
            str(mime): base64.b64encode(bytes(v)).decode() if isinstance(v, (bytes, bytearray)) else v
            for mime, v in data.items()
        }
        encoded = json.dumps(bundle, default=str)
        bundle = json.loads(encoded)  # what cannot be JSON becomes its str now, not a broken reply later
        if len(encoded) > self.room:
            self.truncated = True
            text = bundle.get("text/plain")
            if not isinstance(text, str) or self.room < 256:
                return
            bundle = {"text/plain": cut(text.encode("utf-8", "replace"), self.room // 7)[0].decode("utf-8", "replace")}
            encoded = json.dumps(bundle)
        self.room -= len(encoded)
        self.bundles.append(bundle)

    def result(self, data: dict[str, Any]) -> None:
        """The cell's value (IPython's ``execute_result``): a bundle, and its text as ``value``."""
        text = data.get("text/plain")
        if isinstance(text, str):
            self.value, cut_value = _text(text)
            self.truncated = self.truncated or cut_value
        self.add(data)


#: The outputs of the cell running now (IPython's display hooks write here).
CELL = Outputs()


def run_cell(namespace: dict[str, Any], code: str, number: int) -> dict[str, Any]:
    """Run one cell as plain Python; the last expression's ``repr`` is its value, as in a notebook."""
    import ast
    import linecache

    name = _cell_name(number)
    # Registered so tracebacks (now and from functions defined here, called later) show the source.
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    outputs = Outputs()
    try:
        try:
            tree = ast.parse(code, name, "exec")
        except SyntaxError as exc:
            exc.__traceback__ = None
            raise
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body[-1].value)
            del tree.body[-1]
        exec(compile(tree, name, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, name, "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                outputs.result({"text/plain": repr(value)})
        reply = _ok(outputs)
    except BaseException as exc:
        reply = _error(exc, outputs)
    _flush()
    reply["shell"] = "python"
    return reply


def run_ipython_cell(shell: Any, code: str) -> dict[str, Any]:
    """Run one cell through IPython's ``run_cell``, as ipykernel does; outputs come from its hooks."""
    global CELL
    CELL = outputs = Outputs()
    try:
        result = shell.run_cell(code, store_history=True)
        exc = result.error_before_exec or result.error_in_exec
        if isinstance(exc, SyntaxError) or type(exc).__name__ == "UsageError":
            # The parser's frames, or IPython's for a bad magic (``%nosuch``), are not the user's:
            # the message alone, as IPython itself shows a UsageError.
            exc.__traceback__ = None
        reply = _ok(outputs) if exc is None else _error(exc, outputs)
    except BaseException as exc:  # a SIGINT (output flood) between IPython's own steps
        reply = _error(exc, outputs)
    _flush()
    reply["shell"] = "ipython"
    return reply


def _ok(outputs: Outputs) -> dict[str, Any]:
    return {"status": "ok", "value": outputs.value, "display": outputs.bundles, "truncated": outputs.truncated}


def _error(exc: BaseException, outputs: Outputs) -> dict[str, Any]:
    """An error reply; what the cell displayed before it raised is kept, as in a notebook."""
    trace, truncated = _text(_user_traceback(exc))
    return {
        "status": "error",
        "value": None,
        "display": outputs.bundles,
        "error_name": type(exc).__name__,
        "error_value": _text(str(exc))[0],
        "traceback": trace,
        "truncated": truncated or outputs.truncated,
    }


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()  # type: ignore[union-attr]
        except Exception:
            pass


def load_ipython() -> Any:
    """IPython's shell class fitted to this kernel, or None (``shell: "python"``, or no IPython here).

    Imported by the supervisor before it forks a worker, so a new worker costs a fork, not an
    import. The subclass changes only where outputs go, never how code runs:

    * the display hook and publisher hand MIME bundles to :data:`CELL` instead of printing
      ``Out[n]:`` (what ipykernel does with them: ``execute_result`` / ``display_data``);
    * cells are compiled under the names plain mode uses (``<cell n>``), so tracebacks read the
      same in both modes and show the cell's source;
    * errors are reported from ``run_cell``'s result (the exception, formatted as in plain mode),
      so IPython's own traceback formatting and printing is off.
    """
    if SHELL_WANTED == "python":
        return None
    try:
        from IPython.core.compilerop import CachingCompiler
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets import Type
    except Exception:  # absent or broken: plain Python, and every reply says so
        return None

    class Compiler(CachingCompiler):  # type: ignore[misc]
        def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
            return _cell_name(number)

    class Hook(DisplayHook):  # type: ignore[misc]
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict: dict[str, Any], md_dict: Any = None) -> None:
            CELL.result(format_dict)

        def finish_displayhook(self) -> None:
            pass

    class Publisher(DisplayPublisher):  # type: ignore[misc]
        def publish(self, data: dict[str, Any], metadata: Any = None, source: Any = None, **kwargs: Any) -> None:
            CELL.add(data)

        def clear_output(self, wait: bool = False) -> None:
            pass

    class Shell(InteractiveShell):  # type: ignore[misc]
        compiler_class = Type(Compiler)
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        # Not formatted at all: IPython's traceback formatter (source inspection, highlighting) costs
        # tens of milliseconds per exception, which a fork bomb's hundreds of children would each
        # pay while the supervisor needs the CPU to stop them.
        def showtraceback(self, *args: Any, **kwargs: Any) -> None:
            pass

        def showsyntaxerror(self, *args: Any, **kwargs: Any) -> None:
            pass

        # ``!cmd`` runs through the sandbox's /bin/sh, its output on the cell's own stdout and
        # stderr like any subprocess's (ipykernel pipes it through a pty instead: same text).
        system = InteractiveShell.system_raw

        # ``%matplotlib inline`` (and ``%matplotlib`` alone) ends here: the inline backend needs no event
        # loop, which is ipykernel's answer too. A sandbox has no display for a GUI toolkit's window.
        def enable_gui(self, gui: Any = None) -> None:
            if gui not in (None, "inline"):
                raise RuntimeError(f"no GUI event loop in a sandbox kernel for {gui!r}; use %matplotlib inline")

    return Shell


#: matplotlib's backend in a Jupyter kernel: figures become ``image/png`` display outputs.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def use_inline_backend() -> None:
    """Figures as Jupyter shows them: matplotlib's inline backend, where it is installed (IPython mode only).

    ipykernel registers the same default (``MPLBACKEND`` unless it is set), so ``plt.show()``, a figure left
    open when its cell ends and a figure that is the cell's value come back through the display publisher
    as ``image/png`` bundles, as Sandbox Fusion's jupyter returns them. Only the variable is set: matplotlib
    is imported by the cell that uses it, never by the kernel, and a user's ``matplotlib.use()`` still wins.
    """
    import importlib.util

    if not os.environ.get("MPLBACKEND") and importlib.util.find_spec("matplotlib_inline") is not None:
        os.environ["MPLBACKEND"] = INLINE_BACKEND


def start_shell(shell_class: Any, main: Any) -> Any:
    """The worker's IPython shell over ``main``, with nothing of it kept outside this sandbox.

    History stays in memory (no SQLite file, shared or not); the IPython directory (profile,
    startup files, config) is the kernel's private temporary directory (``IPYTHON_DIR``), so no
    ``~/.ipython`` is read or made, whatever ``HOME`` is. The shell reads no config or startup
    file: only IPython's application class does that, and it is not used.
    """
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no database at all (a dummy one)
    config.HistoryManager.hist_file = ":memory:"  # and none on disk were it turned back on
    config.InteractiveShell.colors = "NoColor"
    config.InteractiveShell.autocall = 0
    return shell_class.instance(config=config, ipython_dir=IPYTHON_DIR, user_module=main)


def collect_killed() -> None:
    """Wait for the worker's children that the supervisor killed after an earlier cell.

    What a cell starts is killed when it ends, but a direct child of the worker stays a zombie
    until the worker waits for it, and a zombie keeps its pid: a fork bomb's would fill the pids
    limit for good, and no later cell could fork. Every child of the worker is dead by now (the
    supervisor kills them before it answers a cell). A ``subprocess.Popen`` the namespace still
    holds for one gets the status it died with, not the 0 Python reports for a child it cannot
    wait for.
    """
    statuses = reap()
    subprocess = sys.modules.get("subprocess")
    if statuses and subprocess is not None:
        import gc

        for obj in gc.get_objects():
            if isinstance(obj, subprocess.Popen) and obj.returncode is None and obj.pid in statuses:
                obj.returncode = os.waitstatus_to_exitcode(statuses[obj.pid])


def worker(requests: int, replies: int) -> None:
    """The worker's loop: one cell per request, all in one ``__main__``. Never returns."""
    main = type(sys)("__main__")
    main.__dict__.update(__builtins__=builtins, __file__=None)
    sys.modules["__main__"] = main
    sys.path.insert(0, os.getcwd())  # as `python3` in the workspace would (isolated mode leaves it out)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    shell = None
    if SHELL_CLASS is not None:
        try:
            shell = start_shell(SHELL_CLASS, main)
        except Exception:  # a broken IPython install: plain Python, and each reply says so
            shell = None
    me = os.getpid()
    while True:
        req = read_frame(requests)
        if req is None:
            os._exit(0)
        collect_killed()
        if shell is not None:
            reply = run_ipython_cell(shell, req["code"])
        else:
            reply = run_cell(main.__dict__, req["code"], req["number"])
        if os.getpid() != me:  # a process the cell forked ran to the cell's end: it ends here, as after a script
            os._exit(0 if reply["status"] == "ok" else 1)
        write_frame(replies, reply)


# ---------------------------------------------------------------------- the supervisor


class Worker:
    """The supervisor's handle on one worker process and its pipes."""

    def __init__(self) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setpgid(0, 0)
                prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                set_dumpable(True)  # the supervisor stays non-dumpable: the worker cannot trace it
                try:  # the OOM killer takes the worker, never the supervisor (raising it needs no privilege)
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")
                except OSError:
                    pass
                for fd in (self.req_w, self.rep_r, self.out_r, self.err_r, HOST_IN, HOST_OUT):
                    os.close(fd)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                os.close(out_w)
                os.close(err_w)
                for res, value in RLIMITS:
                    try:
                        import resource

                        resource.setrlimit(res, (value, value))
                    except (ValueError, OSError):
                        pass
                worker(req_r, rep_w)
            except BaseException:
                try:
                    sys.excepthook(*sys.exc_info())
                except BaseException:
                    pass
            os._exit(code)
        for fd in (req_r, rep_w, out_w, err_w):
            os.close(fd)
        self.pid = pid
        WORKERS.add(pid)
        self.pidfd = os.pidfd_open(pid)
        self.cells = 0
        for fd in (self.out_r, self.err_r, self.rep_r):
            os.set_blocking(fd, False)

    def drain(self, fd: int, stream: Stream | None) -> bool:
        """Read what is in ``fd`` now; False at end of file."""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            if stream is not None:
                stream.feed(data)

    def kill(self) -> int | None:
        """Kill the worker and every process below the supervisor; the worker's wait status."""
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:  # the group first: one system call reaches a whole fork bomb
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                break
            reap()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.pid not in REAPED:
            try:
                REAPED[self.pid] = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                pass
        kill_descendants()  # what left the group (setsid, double fork) is still below us
        for fd in (self.req_w, self.rep_r, self.out_r, self.err_r, self.pidfd):
            try:
                os.close(fd)
            except OSError:
                pass
        WORKERS.discard(self.pid)
        return REAPED.pop(self.pid, None)


#: Wait statuses of exited workers, by pid (reaping an orphan may reap the worker too).
REAPED: dict[int, int] = {}
#: Pids of the live worker (one at a time).
WORKERS: set[int] = set()


def reap() -> dict[int, int]:
    """Collect every exited child (orphans of a cell are re-parented here: we are a subreaper).

    Returns their wait statuses by pid; a worker's is also kept in ``REAPED``.
    """
    statuses: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            return statuses
        statuses[pid] = status
        if pid in WORKERS:
            REAPED[pid] = status


def descendants() -> list[int]:
    """Every process below this one (a scan of /proc, so a process that left its group is found)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":
                continue  # already dead; its parent reaps it (or we do, as the subreaper)
            ppid = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` (one small read), or None where the kernel does not list them."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return None


def leftovers(worker: int) -> bool:
    """Whether any process but the worker is below the supervisor (checked after every cell)."""
    mine, its = _children(os.getpid()), _children(worker)
    if mine is None or its is None:
        return True  # cannot tell cheaply: the full scan decides
    return mine != [worker] or bool(its)


def kill_descendants(spare: int = 0) -> None:
    """SIGKILL the whole tree below the supervisor but ``spare`` until none is left (bounded in time)."""
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        procs = [p for p in descendants() if p != spare]
        if not procs or time.monotonic() >= deadline:
            # Reap last too: the killed processes' orphans were re-parented here as zombies, which
            # ``descendants`` skips but which keep their pids (a fork bomb's would fill the pids
            # limit, and no later cell could fork).
            reap()
            return
        for pid in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        select.select([], [], [], 0.002)


def _death(status: int | None) -> tuple[str, str]:
    if status is None:
        return "KernelDied", "the kernel process vanished"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig == signal.SIGKILL:
            return "KernelDied", "the kernel was killed by SIGKILL (out of memory, or killed)"
        return "KernelDied", f"the kernel was killed by {name}"
    return "KernelDied", f"the kernel exited with code {os.WEXITSTATUS(status)} (os._exit, or a fatal error)"


class Supervisor:
    def __init__(self) -> None:
        self.worker: Worker | None = None
        #: A worker died between cells (nothing of ours noticed until now): the next result says so.
        self.lost = False
        #: The last worker was killed (timeout, crash, reported then): the next cell runs in a new one.
        self.replaced = False
        self.numbers = 0

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        restarted = lost = False
        if self.worker is not None and (req.get("fresh") or _exited(self.worker)):
            lost = not req.get("fresh") and self.worker.cells > 0
            restarted = self.worker.cells > 0
            self.worker.kill()
            self.worker = None
        if self.worker is None:
            restarted = restarted or self.lost or self.replaced
            lost = lost or self.lost
            self.lost = self.replaced = False
            self.worker = Worker()
        w = self.worker
        w.drain(w.out_r, None)  # what background processes wrote since the last cell is not this cell's
        w.drain(w.err_r, None)
        self.numbers += 1
        started = time.monotonic()
        write_frame(w.req_w, {"code": req["code"], "number": self.numbers})
        w.cells += 1
        reply = self._wait(w, float(req["timeout"]), started)
        reply.update(restarted=restarted, state_lost=lost or reply.get("state_lost", False))
        reply["duration_s"] = time.monotonic() - started
        reply.setdefault("shell", SHELL)  # the worker's own word, else (it died) the kernel's mode
        return reply

    def _wait(self, w: Worker, timeout: float, started: float) -> dict[str, Any]:
        out, err = Stream(), Stream()
        body = bytearray()
        deadline = started + timeout
        interrupted_at: float | None = None
        fds = [w.rep_r, w.out_r, w.err_r, w.pidfd, HOST_IN]
        reply: dict[str, Any] | None = None
        while reply is None:
            now = time.monotonic()
            end = deadline if interrupted_at is None else min(deadline, interrupted_at + INTERRUPT_GRACE_S)
            if now >= end:
                if now >= deadline:
                    reply = {"status": "timeout", "error_name": "TimeoutError"}
                    reply["error_value"] = (
                        f"the cell ran longer than its {timeout:g} s timeout; the kernel was restarted"
                    )
                else:
                    reply = _flooded("did not stop when interrupted; the kernel was restarted")
                self._drop(w, out, err)
                reply["state_lost"] = True
                break
            ready, _, _ = select.select(fds, [], [], end - now)
            if HOST_IN in ready:  # the host sends nothing during a cell: readable means it went away
                w.kill()
                kill_descendants()
                remove_ipython_dir()
                os._exit(0)
            for fd, stream in ((w.out_r, out), (w.err_r, err)):
                if fd in ready and not w.drain(fd, stream):
                    fds.remove(fd)
            if interrupted_at is None and max(out.total, err.total) > STOP:
                interrupted_at = time.monotonic()
                try:
                    os.kill(w.pid, signal.SIGINT)
                except OSError:
                    pass
            if w.rep_r in ready:
                reply = self._reply(w, body)
            if reply is None and w.pidfd in ready:
                reply = self._reply(w, body)  # a reply written just before dying still counts
                if reply is None:
                    w.drain(w.out_r, out)
                    w.drain(w.err_r, err)
                    status = w.kill()
                    self.worker = None
                    self.replaced = True
                    name, value = _death(status)
                    reply = {"status": "crashed", "error_name": name, "error_value": value, "state_lost": True}
        if self.worker is w:
            if leftovers(w.pid):  # what a cell starts does not outlive it, as with a command
                kill_descendants(spare=w.pid)
            w.drain(w.out_r, out)  # everything the cell wrote is in the pipes before its reply
            w.drain(w.err_r, err)
        if interrupted_at is not None and reply.get("status") == "error":
            reply.update(_flooded("was interrupted"))
        reply["stdout"], out_cut = out.text()
        reply["stderr"], err_cut = err.text()
        reply["truncated"] = bool(reply.get("truncated")) or out_cut or err_cut
        return reply

    def _drop(self, w: Worker, out: Stream, err: Stream) -> None:
        w.drain(w.out_r, out)
        w.drain(w.err_r, err)
        w.kill()
        self.worker = None
        self.replaced = True

    def _reply(self, w: Worker, body: bytearray) -> dict[str, Any] | None:
        """The worker's reply once all of it arrived (it writes one frame per cell)."""
        while True:
            try:
                data = os.read(w.rep_r, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                break
            body += data
        if len(body) < 4 or len(body) < 4 + int.from_bytes(body[:4], "big"):
            return None
        msg: dict[str, Any] = json.loads(bytes(body[4 : 4 + int.from_bytes(body[:4], "big")]))
        return msg


def _flooded(what: str) -> dict[str, Any]:
    return {
        "status": "error",
        "error_name": "OutputLimitExceeded",
        "error_value": f"the cell wrote more than {STOP} bytes to stdout or stderr and {what}",
        "traceback": None,
    }


def _exited(w: Worker) -> bool:
    ready, _, _ = select.select([w.pidfd], [], [], 0)
    return bool(ready)


HOST_IN = -1
HOST_OUT = -1
#: IPython's shell class (``load_ipython``), or None for plain Python; ``SHELL`` names the mode.
SHELL_CLASS: Any = None
SHELL = "python"
#: The kernel's private IPython directory (made at start in the sandbox's TMPDIR, removed at exit).
IPYTHON_DIR = ""


def make_ipython_dir() -> str:
    """A private directory for IPython's profile, shared by this kernel's workers; "" if none can be made."""
    import tempfile

    try:
        return tempfile.mkdtemp(prefix="sandboxkit-ipython-")
    except OSError:
        return ""


def remove_ipython_dir() -> None:
    if IPYTHON_DIR:
        import shutil

        shutil.rmtree(IPYTHON_DIR, ignore_errors=True)


def main() -> None:
    global HOST_IN, HOST_OUT, SHELL_CLASS, SHELL, IPYTHON_DIR
    # The protocol moves off descriptors 0-2, which a cell's own output and input must own.
    HOST_IN, HOST_OUT = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    prctl(_PR_SET_CHILD_SUBREAPER, 1)
    set_dumpable(False)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    SHELL_CLASS = load_ipython()
    if SHELL_CLASS is not None:
        IPYTHON_DIR = make_ipython_dir()
        if not IPYTHON_DIR:  # no writable TMPDIR: IPython would fall back to ~/.ipython; plain Python instead
            SHELL_CLASS = None
    SHELL = "python" if SHELL_CLASS is None else "ipython"
    if SHELL_CLASS is not None:
        use_inline_backend()
    sup = Supervisor()
    sup.worker = Worker()  # forked now, so the first cell pays no fork
    write_frame(HOST_OUT, {"ready": True, "shell": SHELL})
    while True:
        try:
            req = read_frame(HOST_IN)
        except (OSError, ValueError):
            req = None
        if req is None:
            if sup.worker is not None:
                sup.worker.kill()
            kill_descendants()
            remove_ipython_dir()
            os._exit(0)
        if req.get("op") == "ping":
            write_frame(HOST_OUT, {"pong": True})
            continue
        try:
            reply = sup.handle(req)
        except Exception as exc:  # the supervisor's own failure: report it, restart the worker
            if sup.worker is not None:
                sup.worker.kill()
                sup.worker = None
            reply = {
                "status": "crashed",
                "shell": SHELL,
                "error_name": "KernelError",
                "error_value": f"{type(exc).__name__}: {exc}",
                "state_lost": True,
                "stdout": "",
                "stderr": "",
            }
        write_frame(HOST_OUT, reply)


if __name__ == "__main__":
    main()
