"""Interactive problems: the solution talks to an **interactor** program over pipes, case by case.

A suite whose checker is ``{"type": "interactor", "language": "cpp", "code": "..."}`` is interactive. For
each stdio case the interactor runs with testlib's contract ``interactor input answer``: ``stdin`` of the
case is its input file, ``expected_stdout`` its answer file; its stdout feeds the solution's stdin and the
solution's stdout feeds its stdin. Its exit code is the verdict: 0 accepts, 1 (wrong answer) or 2
(presentation error) rejects, 3 means the interactor itself failed.

Both programs run in **one** sandbox session (the solution and the interactor compiled once, every case
run there), joined by two FIFOs. The launcher holds both FIFOs open read-write while the interactor
starts, so the interactor's ``open`` calls never block and it can hide itself (below) before the
solution exists; the solution's opens then find the interactor's ends (it waits until the solution has opened both, then drops its own), so each side
still sees end-of-file when the other exits.

The solution must not be able to read what the interactor hides (the secret number of a guessing game):

* the input and answer files get random names, the launcher opens them as descriptors 3 and 4 and
  unlinks them before the solution starts; the interactor reads ``/dev/fd/3`` and ``/dev/fd/4``, and the
  solution inherits neither descriptor;
* the interactor is made non-dumpable before the solution starts (a compiled one is executed from an
  execute-only file, which the kernel marks non-dumpable; a Python one calls ``prctl(PR_SET_DUMPABLE, 0)``
  first), so the solution cannot open ``/proc/<pid>/fd/3`` or read its memory. The launcher waits for
  that (``/proc/<pid>/exe`` turns unreadable, polled with a timed ``read`` so the wait does not take the
  CPU the interactor needs) before it starts the solution; if it has not happened within
  ``_HIDE_WAIT_S`` the solution is never started and the case is ``infra_error`` (an overloaded machine
  must not turn into a peek that passes). The launcher prints ``_STARTED`` just before it starts the
  solution, so a run whose time limit ends the wait first (a loaded machine) is the judge's
  ``infra_error`` too, never the solution's ``timeout``: printed before the solution exists, the line
  cannot be removed by it, and without the line the solution never ran.

Who is to blame, which decides between a 0 and "no reward":

* the interactor exits 3, or does not compile, or is missing: :class:`CheckerFailed` (``infra_error``,
  reward ``None``): it says nothing about the solution;
* the interactor exits with a code outside testlib's 0-3 (a crash: a Rust interactor's panic exits
  101) after it read what the solution wrote: the case is a ``wrong_answer``, as a checker choking on
  the solution's output is;
* the interactor is *killed by a signal*: the case fails (``error``). The solution runs as the same user
  and can kill it; treating that as "the judge broke" would let a policy learn to turn its zeros into
  ``None`` by killing the judge. A trusted interactor crashing on its own is far rarer than that;
* the interactor's rejection (1, 2) is the case's verdict (``wrong_answer``) even if the solution then
  died: it died writing to the pipe the interactor had closed;
* the solution's own failure (non-zero exit, signal, timeout, memory) fails the case even if the
  interactor accepted, as Codeforces-style judges do;
* more than one result line on the run's output: only the solution could have written the extra one
  (through ``/proc/<launcher>/fd/1``), so the case fails;
* the interactor's file is not the one set aside (its SHA-256, taken before any solution code ran in
  the session, is checked by the launcher before every case): only the solution could have changed
  it, so the case fails. Nothing of the solution survives its command (every backend kills what is
  left), so nothing can swap the file between that check and the interactor's ``exec``; a Python
  interactor runs as ``python3 -I``, so modules planted next to it or in the user's site-packages
  are never imported;
* the solution kills its sandbox (the subprocess backend's fork server): that case fails, and the
  remaining cases run in a fresh session (:mod:`sandboxkit.judge._sessions`).

Interactive grading needs a stateful backend that runs bash (subprocess, Docker, the cloud backends).
Languages that reserve large address space (Java, Go, JavaScript) cannot run under the launcher's
limits and are refused with a clear error, like the compiled-session fast path of stdio cases.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
import shlex
from dataclasses import dataclass

from sandboxkit.errors import InvalidRequest
from sandboxkit.judge._grading_state import Job, Outcome, all_compile_error, compile_message, judge_run, timed_run
from sandboxkit.judge._sessions import Attempt, run_in_sessions
from sandboxkit.judge.cases import InvalidTests, StdioCase
from sandboxkit.judge.checkers import Checker, CheckerFailed
from sandboxkit.judge.verdict import CaseResult, trim_message
from sandboxkit.languages import Language, resolve_language
from sandboxkit.models import RunRequest, Status
from sandboxkit.session import Session

__all__ = ["INTERACTIVE_LANGUAGES", "check_interactive", "run_interactive"]

#: Languages an interactor or an interactive solution may be written in (see the module docstring).
INTERACTIVE_LANGUAGES = frozenset({"c", "cpp", "rust", "python"})
#: Where the compiled interactor lives in the workspace (away from the solution's ``main``).
_DIR = ".interactor"
_MARK = "@@sandboxkit-interact@@"
#: Printed by the launcher just before it starts the solution (see the module docstring).
_STARTED = _MARK + "-started"
#: How long the launcher waits for the interactor to turn non-dumpable. Past it the solution never starts
#: (its secret would be readable): the case is an infrastructure failure, never a run that could peek.
_HIDE_WAIT_S = 5
#: The launcher's exit code when the interactor did not turn non-dumpable in time.
_NOT_HIDDEN = 96
#: The launcher's exit code when the interactor ended before the solution could start.
_DIED_EARLY = 95
#: The launcher's exit code when the interactor's file is not the one installed (the solution changed it).
_TAMPERED = 94
#: A compiled program's probing run (to compile it once): only a compile error matters, so it is cut short.
_PROBE = 0.2
#: Prepended to a Python interactor: non-dumpable, so the solution cannot read its descriptors or memory.
_PY_HIDE = (
    "try:\n"
    "    __import__('ctypes').CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0\n"
    "except Exception:\n"
    "    pass\n"
)


def check_interactive(job: Job, interactor: Checker, cases: list[tuple[int, object]]) -> Language:
    """The interactor's language, after checking the problem can be graded interactively.

    Raises:
        InvalidTests: a case is not a stdio case, or a language cannot run interactively.
        InvalidRequest: the backend is not stateful or does not run bash.
    """
    if any(not isinstance(case, StdioCase) for _, case in cases):
        raise InvalidTests("an interactive problem has only stdio cases (input file, answer file)")
    ilang = resolve_language(interactor.language)
    for what, lang in (("solution", job.lang), ("interactor", ilang)):
        if lang.name not in INTERACTIVE_LANGUAGES:
            raise InvalidTests(
                f"the {what}'s language {lang.name!r} cannot run in an interactive problem; "
                f"use one of {', '.join(sorted(INTERACTIVE_LANGUAGES))}"
            )
    caps = job.pool.backend.capabilities
    if not caps.stateful or "bash" not in caps.languages:
        raise InvalidRequest(
            "interactive problems need a stateful backend that runs bash (subprocess, docker, daytona, e2b); "
            f"{job.pool.backend.name!r} is not one",
            backend=job.pool.backend.name,
        )
    return ilang


async def run_interactive(job: Job, interactor: Checker, group: list[tuple[int, StdioCase]]) -> Outcome:
    """Compile both programs once in one session, then run every case with the interactor.

    A session the solution kills (its fork server) is replaced by a fresh one for the remaining cases
    (:mod:`sandboxkit.judge._sessions`): the case that killed it has failed, the others are still judged.

    Raises:
        CheckerFailed: the interactor does not compile or reports its own failure.
        SandboxError: the sandbox failed (the caller turns it into an ``infra_error`` verdict).
    """
    ilang = check_interactive(job, interactor, list(group))

    async def session_pass(
        job: Job, attempt: Attempt, pending: list[tuple[int, StdioCase]], outcome: Outcome
    ) -> Outcome | None:
        installed = await _prepare_interactor(attempt.session, job, interactor, ilang)
        compiled = await _prepare_solution(attempt.session, job, pending)
        if compiled is not None:
            return compiled
        attempt.program_ran = job.lang.compile is not None  # its compile-and-probe run came back
        for index, case in pending:
            outcome.cases[index] = await _run_case(attempt.session, job, interactor, installed, index, case)
            attempt.program_ran = True
            if job.stop and not outcome.cases[index].passed:
                break
        return None

    return await run_in_sessions(job, group, session_pass)


@dataclass(frozen=True)
class _Installed:
    """The interactor as set aside before the solution first ran: how to run it and what its file holds."""

    argv: list[str]
    #: Its file in :data:`_DIR`, checked by the launcher before every case.
    file: str
    #: The file's SHA-256 (hex), taken before any solution code ran in the session.
    digest: str
    #: The file's mode while it runs (execute-only makes a compiled interactor non-dumpable).
    mode: str


async def _prepare_interactor(session: Session, job: Job, interactor: Checker, lang: Language) -> _Installed:
    """Build the interactor in its own directory and record its digest (no solution code has run yet).

    Raises:
        CheckerFailed: it does not compile, or the sandbox cannot hash it (``sha256sum``).
    """
    code = _PY_HIDE + interactor.code if lang.name == "python" else interactor.code
    if lang.compile is not None:
        probe = await session.run(
            RunRequest(code=code, language=lang.name, stdin="", limits=job.limits.merged(timeout_s=_PROBE))
        )
        if probe.status is Status.COMPILE_ERROR:
            raise CheckerFailed(f"the interactor does not compile: {compile_message(probe)}; fix the interactor")
        installed = _Installed(argv=lang.run_argv(code), file="main", digest="", mode="0111")
        moved = await session.exec(
            f"mkdir -p {_DIR} && mv -f main {_DIR}/main && chmod 0500 {_DIR}/main && sha256sum {_DIR}/main && "
            f"chmod 0111 {_DIR}/main && find . -mindepth 1 -maxdepth 1 ! -name {_DIR} -exec rm -rf {{}} +"
        )
    else:
        # -I: the interactor's directory and the user's site-packages (HOME is in the workspace) are not
        # on its sys.path, so a module or .pth start-up hook the solution plants there never runs in it.
        argv = lang.run_argv(code)
        installed = _Installed(argv=[argv[0], "-I", *argv[1:]], file=lang.source_name(code), digest="", mode="0500")
        await session.write_files({f"{_DIR}/{installed.file}": code})
        moved = await session.exec(f"chmod 0500 {_DIR}/{installed.file} && sha256sum {_DIR}/{installed.file}")
    digest = moved.stdout.split()[0] if moved.exit_code == 0 and moved.stdout.strip() else ""
    if lang.compile is None and digest != hashlib.sha256(code.encode("utf-8")).hexdigest():
        digest = ""  # the sandbox's sha256sum must agree with ours, or the launcher's check means nothing
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise CheckerFailed(
            f"could not set the interactor aside and hash it (sha256sum): {moved.stderr.strip()[-200:]}"
        )
    return dataclasses.replace(installed, digest=digest)


async def _prepare_solution(session: Session, job: Job, group: list[tuple[int, StdioCase]]) -> Outcome | None:
    """Compile the solution once (a compile error fails every case) or just write its source."""
    if job.lang.compile is None:
        await session.write_files({job.lang.source_name(job.code): job.code})
        return None
    probe = await timed_run(
        job,
        session.run(
            RunRequest(code=job.code, language=job.lang.name, stdin="", limits=job.limits.merged(timeout_s=_PROBE))
        ),
    )
    if probe.status is Status.COMPILE_ERROR:
        return all_compile_error(list(group), compile_message(probe))
    return None


def _launcher(solution: list[str], interactor: _Installed, inp: str, ans: str) -> str:
    """The bash program that joins the two processes (see the module docstring for each step's reason)."""
    path = shlex.quote(f"{_DIR}/{interactor.file}")
    return f"""
[ -d {_DIR} ] && [ ! -L {_DIR} ] && [ -f {path} ] && [ ! -L {path} ] && chmod 0500 {path} || exit {_TAMPERED}
digest=$(sha256sum < {path}) && [ "${{digest%% *}}" = {interactor.digest} ] && chmod {interactor.mode} {path} \
  || exit {_TAMPERED}
rm -f .s2i .i2s .ierr .hold; mkfifo .s2i .i2s .hold || exit 97
exec 3<{inp} 4<{ans} 5<>.hold 6<>.s2i 7<>.i2s || exit 97
rm -f {inp} {ans} .hold
trap '' PIPE
(cd {_DIR} && exec {shlex.join(interactor.argv)} /dev/fd/3 /dev/fd/4 5<&- 6<&- 7<&-) <.s2i >.i2s 2>.ierr &
ipid=$!
exec 3<&- 4<&-
SECONDS=0
while [ -e /proc/$ipid/exe ]; do
  if [ $SECONDS -ge {_HIDE_WAIT_S} ]; then kill -9 $ipid; wait $ipid; exit {_NOT_HIDDEN}; fi
  read -t 0.002 -u 5 _
done
read -r _ _ state _ < /proc/$ipid/stat
if [ "$state" = Z ]; then wait $ipid; exit {_DIED_EARLY}; fi
echo {_STARTED}
{shlex.join(solution)} >.s2i <.i2s 5<&- 6<&- 7<&- &
spid=$!
until [ /proc/$spid/fd/1 -ef .s2i ] && [ /proc/$spid/fd/0 -ef .i2s ] || [ ! -e /proc/$spid/exe ]; do
  read -t 0.001 -u 5 _
done
exec 5<&- 6<&- 7<&-
wait $spid
src=$?
wait $ipid
irc=$?
echo "{_MARK} $src $irc"
tail -c 400 .ierr
"""


async def _run_case(
    session: Session, job: Job, interactor: Checker, installed: _Installed, index: int, case: StdioCase
) -> CaseResult:
    inp, ans = (f".in-{secrets.token_hex(8)}", f".ans-{secrets.token_hex(8)}")
    await session.write_files({inp: case.stdin, ans: case.expected_stdout or ""})
    script = _launcher(job.lang.run_argv(job.code), installed, inp, ans)
    limits = job.limits.merged(timeout_s=max(job.limits.timeout_s, interactor.timeout_s))
    result = await timed_run(job, session.run(script, language="bash", limits=limits))
    if result.exit_code == _TAMPERED and _MARK not in result.stdout:
        # Only the solution ran in this session since the interactor was hashed: it changed the judge.
        return _case(index, "error", "the solution changed the interactor's file (its digest differs)", 0.0)
    if result.exit_code in (_NOT_HIDDEN, _DIED_EARLY) and _MARK not in result.stdout:
        # The solution never started (so it cannot have chosen this exit code): the judge's own failure.
        raise CheckerFailed(
            f"the interactor did not hide its files within {_HIDE_WAIT_S}s (not yet non-dumpable; the sandbox is"
            " overloaded or the interactor cannot call prctl), so the solution was not started"
            if result.exit_code == _NOT_HIDDEN
            else "the interactor ended before the solution started; fix the interactor"
        )
    if result.status is Status.TIMEOUT and _STARTED not in result.stdout:
        raise CheckerFailed(
            "the time limit ended while the interactor had not yet hidden its files (the sandbox is"
            " overloaded or the interactor cannot call prctl), so the solution was never started"
        )
    if result.status is not Status.OK:
        return judge_run(index, case, result, job, Outcome())
    if result.exit_code == 97:
        raise CheckerFailed("the launcher could not set up the pipes and the hidden files; see the sandbox logs")
    marks = [line for line in result.stdout.splitlines() if line.startswith(_MARK + " ")]
    if len(marks) != 1:
        return _case(index, "error", "the solution wrote to the judge's result channel", result.duration_s)
    try:
        solution_rc, interactor_rc = (int(x) for x in marks[0].split()[1:3])
    except ValueError:
        return _case(index, "error", "the judge's result line was tampered with", result.duration_s)
    said = [line.strip() for line in result.stdout.split(marks[0], 1)[1].splitlines() if line.strip()]
    message = trim_message(said[-1]) if said else ""
    if interactor_rc == 3:
        raise CheckerFailed(f"the interactor reported its own failure on case {index}: {message}; fix the interactor")
    if interactor_rc >= 128:
        why = f"the interactor was killed by signal {interactor_rc - 128} (the solution may have killed it)"
        return _case(index, "error", why, result.duration_s)
    if interactor_rc in (1, 2):  # first: a solution that dies after being rejected died of the closed pipe
        return _case(index, "wrong_answer", message or "rejected by the interactor", result.duration_s)
    if interactor_rc != 0:
        # A code outside testlib's 0-3 is a crash (a Rust interactor's panic exits 101) after it read what
        # the solution wrote: the solution's output caused it, as a checker choking on it (only exit 3 is
        # "the interactor failed"; one that dies before the solution starts is caught above).
        why = f"the interactor crashed (exit code {interactor_rc}) on what the solution wrote"
        return _case(index, "wrong_answer", trim_message(f"{why}: {message}" if message else why), result.duration_s)
    if solution_rc != 0:
        why = f"killed by signal {solution_rc - 128}" if solution_rc >= 128 else f"exit code {solution_rc}"
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return _case(index, "error", trim_message(f"{why}: {lines[-1]}" if lines else why), result.duration_s)
    return _case(index, "passed", "", result.duration_s)


def _case(index: int, status: str, message: str, time_s: float) -> CaseResult:
    return CaseResult(index=index, type="stdio", status=status, message=message, time_s=time_s)  # type: ignore[arg-type]
