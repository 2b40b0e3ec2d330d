"""rLLM adapters: ``SandboxEnv`` (the ``BaseEnv`` contract) and ``RLLMSandbox`` (``rllm.sandbox.protocol.Sandbox``).

rLLM's execution engine builds one environment per trajectory with ``from_dict(row)``, then
calls ``reset``, ``step`` (repeatedly), ``compute_final_reward`` and ``close`` from a
64-thread pool. :class:`SandboxEnv` holds one session sandbox per episode, taken from a
pool shared by every environment in the process, and offers the LLM-in-Sandbox tool set:
``execute_bash``, ``str_replace_editor`` (view / create / str_replace / insert) and ``submit``.
Files move through the backend's file API, under a configurable ``/testbed``-style layout,
so the same dataset runs on any backend.

A malformed action is answered with an error observation, never an exception. When the
sandbox infrastructure fails, the episode ends cleanly (``done=True``, ``info["infra_error"]``)
and the sandbox is released. ``close`` always releases it; ``reset`` releases the previous one.

``SandboxEnv`` holds the episode's lifecycle and tool dispatch; its pieces are separate modules:
the editor (:mod:`._rllm_editor`), the grading (:mod:`._rllm_grading`) and the path mapping
(:mod:`._rllm_paths`).

rLLM is not on PyPI. When it is importable, ``SandboxEnv`` subclasses its ``BaseEnv`` (the
engine asserts ``isinstance``); otherwise it subclasses a local class with the same contract.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import partial
from typing import Any

from sandboxkit._request import renamed
from sandboxkit.errors import InvalidRequest, SandboxError, SandboxkitError
from sandboxkit.integrations._cells import format_cell, run_cell
from sandboxkit.integrations._codetool import CODE_INTERPRETER_SCHEMA
from sandboxkit.integrations._format import format_error, format_result
from sandboxkit.integrations._llm_in_sandbox import Layout, check_domain, input_files, is_llm_in_sandbox_row
from sandboxkit.integrations._prepared import fork_prepared
from sandboxkit.integrations._rllm_editor import EpisodeFiles, edit
from sandboxkit.integrations._rllm_grading import grade_episode
from sandboxkit.integrations._rllm_paths import EpisodePaths, real_workdir_options
from sandboxkit.integrations._rllm_sandbox import RLLMSandbox
from sandboxkit.integrations._runtime import GRACE_S, BackendLike, PoolHandle, open_session, shared_handle
from sandboxkit.integrations._toolcalls import ToolCall, ToolCallError, calls_in_action
from sandboxkit.integrations._workspace import WorkspaceMap
from sandboxkit.models import ExecResult, Limits, Status
from sandboxkit.session import Session

__all__ = ["TOOLS", "BaseEnv", "RLLMSandbox", "SandboxEnv"]

log = logging.getLogger(__name__)

try:  # the engine asserts isinstance(env, rllm's BaseEnv), so subclass the real one when it exists
    from rllm.environments.base.base_env import BaseEnv  # type: ignore[import-not-found]
except ImportError:  # rLLM is installed from git only; keep the same contract locally

    class BaseEnv(ABC):  # type: ignore[no-redef]
        """Local stand-in for ``rllm.environments.base.base_env.BaseEnv`` (same methods)."""

        @property
        def idx(self) -> Any:
            """Position of this environment in the engine's batch."""
            return getattr(self, "_idx", None)

        @idx.setter
        def idx(self, value: Any) -> None:
            self._idx = value

        @abstractmethod
        def reset(self) -> tuple[Any, dict[str, Any]]:
            """Start an episode: ``(observation, info)``."""

        @abstractmethod
        def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
            """Apply an action: ``(observation, reward, done, info)``."""

        def close(self) -> None:
            """Release resources."""
            return

        @staticmethod
        @abstractmethod
        def from_dict(info: dict[str, Any]) -> BaseEnv:
            """Build an environment from one dataset row."""

        @staticmethod
        def is_multithread_safe() -> bool:
            """Whether the engine may call several environments from threads at once."""
            return True


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


#: OpenAI function schemas of the environment's tools (give them to the agent's chat template).
TOOLS: list[dict[str, Any]] = [
    _tool(
        "execute_bash",
        "Run a bash command in the working directory and return its output and exit code.",
        {"command": {"type": "string", "description": "The bash command to run."}},
        ["command"],
    ),
    _tool(
        "str_replace_editor",
        "View, create and edit text files. `view` shows a file with line numbers (or lists a directory); "
        "`create` writes file_text to path; `str_replace` replaces the unique occurrence of old_str with new_str; "
        "`insert` inserts new_str after line insert_line (0 = top).",
        {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string", "description": "Absolute path inside the working directory, or relative."},
            "file_text": {"type": "string", "description": "Content for `create`."},
            "old_str": {"type": "string", "description": "Exact text to replace (`str_replace`)."},
            "new_str": {"type": "string", "description": "Replacement (`str_replace`) or inserted text (`insert`)."},
            "insert_line": {"type": "integer", "description": "Line after which to insert (`insert`)."},
            "view_range": {"type": "array", "description": "[start, end] lines for `view` (end -1 = last)."},
        },
        ["command", "path"],
    ),
    _tool("submit", "Finish the task; your work is graded as it is now.", {}, []),
]

CONTINUE_MSG = (
    "No tool call was found in your response. Call one of the tools (execute_bash, str_replace_editor, submit) "
    "in every response."
)
FINISHED_MSG = "<<< Finished >>>"


class SandboxEnv(BaseEnv):
    """One sandbox per episode, with ``execute_bash`` / ``str_replace_editor`` / ``submit``.

    Args:
        task: the dataset row. Recognised keys: ``problem_statement`` (or ``question`` /
            ``prompt``), ``files`` ({path: text} written into the workdir at reset),
            ``tests`` and ``solution_path`` (graded with the judge at the end), ``reward_command``
            (a shell command; exit 0 = reward 1.0), ``language``; and LLM-in-Sandbox-RL rows
            (``ground_truth`` + ``domain``, optional ``qa_type``, ``input_files`` copied under
            ``input_dir``, the answer read from ``{output_dir}/answer.txt``; see
            :mod:`sandboxkit.integrations._llm_in_sandbox` and docs/agent_environments.md).
        backend: backend name, Backend instance or SyncSandboxPool. With a name, every
            environment in the process with the same settings shares one pool.
        workdir: the directory the model is told its files live in.
        timeout_s: seconds one command may run (default 30).
        max_output_chars: longest observation text (head and tail kept).
        limits: limits of the sandbox (``timeout_s`` overrides ``limits.timeout_s`` per command).
        deadline_s: wall-clock bound of one sandbox call, queue wait included.
        pool_options: :class:`~sandboxkit.pool.SandboxPool` options of the shared pool.
        backend_options: options of the backend (when ``backend`` is a name).
        setup_command: a shell command run once the task's files are written (``pip install -e .``).
        fork_from_checkpoint: prepare each task once (files written, ``setup_command`` run),
            checkpoint it, and start every episode of that task as a fork of the checkpoint
            (GRPO's N rollouts per prompt; copy-on-write on the subprocess backend). Needs a
            backend whose ``capabilities.fork`` is not ``"none"``. Set it in ``env_args``.
        timeout: the deprecated old name of ``timeout_s`` (in ``env_args`` / :meth:`from_dict`, ``timeout``
            and ``step_timeout`` stay the keys rLLM configs use, without a warning).
    """

    def __init__(
        self,
        task: Mapping[str, Any] | None = None,
        *,
        backend: BackendLike = "subprocess",
        workdir: str = "/testbed",
        timeout_s: float | None = None,
        max_output_chars: int = 8000,
        limits: Limits | None = None,
        deadline_s: float = 300.0,
        pool_options: Mapping[str, Any] | None = None,
        backend_options: Mapping[str, Any] | None = None,
        setup_command: str | None = None,
        fork_from_checkpoint: bool = False,
        stateful_python: bool = False,
        timeout: float | None = None,
    ) -> None:
        timeout_s = renamed(timeout_s, timeout, "timeout", where="SandboxEnv")
        self.task: dict[str, Any] = dict(task or {})
        self.setup_command = setup_command
        self.fork_from_checkpoint = fork_from_checkpoint
        self.stateful_python = bool(stateful_python)
        self._workdir = workdir
        try:
            self.layout = Layout.from_row(self.task, workdir)
        except ValueError:  # a bad row must not kill the engine's env builder: reset() reports it
            self.layout = Layout.from_row({}, workdir)
        options = {"max_concurrency": 64, "max_sandboxes": 128, **dict(pool_options or {})}
        backend_options = real_workdir_options(backend, backend_options, self.layout)
        if backend_options:
            options["backend_options"] = dict(backend_options)
        self.handle: PoolHandle = (
            shared_handle(backend, **options) if isinstance(backend, str) else PoolHandle(backend, **options)
        )
        self.workspace = WorkspaceMap(self.layout.working_dir)
        self.paths = EpisodePaths(self.workspace, self._absolute_paths)
        self.timeout_s = 30.0 if timeout_s is None else timeout_s
        self.max_output_chars = max_output_chars
        self.limits = (limits or Limits()).merged(timeout_s=self.timeout_s)
        self.deadline_s = deadline_s
        self._session: Session | None = None
        self._lock = threading.RLock()
        self._done = False
        self._final_reward: float | None = None
        self.final_info: dict[str, Any] = {}
        self.infra_error: str | None = None

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas this environment answers (``TOOLS``, plus ``code_interpreter`` with ``stateful_python``)."""
        return [*TOOLS, CODE_INTERPRETER_SCHEMA] if self.stateful_python else list(TOOLS)

    # ------------------------------------------------------------------ contract

    @staticmethod
    def from_dict(info: dict[str, Any] | str) -> SandboxEnv:
        """Build from one dataset row merged with ``env_args`` (as rLLM does: ``{**row, **env_args}``).

        Keys that match constructor arguments configure the environment; the row is the task.
        """
        data = json.loads(info) if isinstance(info, str) else dict(info)
        for old in ("timeout", "step_timeout"):  # rLLM's and LLM-in-Sandbox-RL's env_args names
            if old in data and "timeout_s" not in data:
                data["timeout_s"] = data.pop(old)
        image = data.pop("docker_image", None)  # LLM-in-Sandbox-RL's env_args: the image of a Docker sandbox
        if image and data.get("backend", "subprocess") == "docker":
            data["backend_options"] = {"image": image, **dict(data.get("backend_options") or {})}
        params = inspect.signature(SandboxEnv.__init__).parameters
        kwargs = {k: data[k] for k in params if k not in ("self", "task") and k in data}
        task = {k: v for k, v in data.items() if k not in kwargs}
        return SandboxEnv(task, **kwargs)

    @staticmethod
    def is_multithread_safe() -> bool:
        """Yes: environments share only the thread-safe pool handle."""
        return True

    def reset(self, task: Mapping[str, Any] | None = None, **_: Any) -> tuple[str, dict[str, Any]]:
        """Release any previous sandbox, open a fresh one and write the task's files.

        Accepts ``task`` so rLLM's workflow engine (which reuses one environment) can pass a new row.
        Never raises for an infrastructure failure: the info says ``infra_error`` and the next
        ``step`` ends the episode.
        """
        with self._lock:
            self._release()
            if task is not None:
                self.task = dict(task)
            self._done = False
            self._final_reward = None
            self.final_info = {}
            self.infra_error = None
            info: dict[str, Any] = {
                "workdir": self.workspace.workdir,
                "backend": self.handle.backend_name,
                "extra_info": dict(self.task),  # as LLM-in-Sandbox's env gives it (its agent reads it)
            }
            try:
                ruled = self.task.get("tests") is None and not self.task.get("reward_command")
                if ruled and is_llm_in_sandbox_row(self.task):
                    check_domain(self.task.get("domain"))  # a row no rule can grade is the dataset's error
                self.layout = Layout.from_row(self.task, self._workdir)
                self.workspace = WorkspaceMap(self.layout.working_dir)
                self.paths = EpisodePaths(self.workspace, self._absolute_paths)
                info["workdir"] = self.workspace.workdir
                if self.fork_from_checkpoint:
                    # A checkpoint carries the workspace: the task's files go there, relative.
                    files = self._task_files()
                    self._session = self._call(
                        lambda p: fork_prepared(p, files, self.setup_command, self.limits, timeout_s=self.timeout_s)
                    )
                    info["forked_from"] = self._session.origin.id if self._session.origin else None
                    self.paths.bind_to_workspace(partial(self._run_at_home, self._session))
                else:
                    self._session = self._call(lambda p: open_session(p, self.limits))
                    self.paths.bind(partial(self._run_at_home, self._session))
                    files = {self.paths.fs_path(path): body for path, body in self._task_files().items()}
                    if files:
                        self._call(lambda _p, s=self._session: s.write_files(files))
                    if self.setup_command:
                        setup = self.setup_command
                        done = self._call(
                            lambda _p, s=self._session: s.exec(setup, cwd=self.paths.cwd, timeout_s=self.timeout_s)
                        )
                        if done.status is not Status.OK:
                            raise ValueError(f"setup_command failed ({done.status.value}): {done.stderr[-500:]!r}")
                info["sandbox_id"] = self._session.sandbox_id
            except Exception as exc:  # never raise into the engine: the next step ends the episode
                if not isinstance(exc, (SandboxError, ValueError)):
                    log.exception("opening the episode's sandbox failed unexpectedly")
                self._fail(exc)
                info.update(infra_error=True, error=str(exc) or type(exc).__name__)
            return self._problem_statement(), info

    def step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply the agent's tool call(s); see the module docstring for accepted shapes."""
        with self._lock:
            if self.infra_error is not None:
                self._release()
                return f"Error: the sandbox is unavailable ({self.infra_error}).", 0.0, True, self._infra_info()
            if self._done:
                return "The episode is over; call reset() to start a new one.", 0.0, True, {}
            calls = calls_in_action(action)
            if not calls:
                return CONTINUE_MSG, 0.0, False, {"tool_calls": 0}
            observations: list[str] = []
            for call in calls:
                if isinstance(call, ToolCallError):
                    observations.append(f"Error: {call.message}")
                    continue
                if call.name in ("submit", "finish"):
                    self._done = True
                    reward = self.compute_final_reward()
                    observations.append(FINISHED_MSG)
                    info = {"tool_calls": len(calls), **self.final_info}
                    return "\n\n".join(observations), reward, True, info
                observations.append(self._dispatch(call))
                if self.infra_error is not None:
                    self._release()
                    return "\n\n".join(observations), 0.0, True, self._infra_info()
            return "\n\n".join(observations), 0.0, False, {"tool_calls": len(calls)}

    def compute_final_reward(self) -> float:
        """Grade the workspace once (cached): judge the solution file against ``tests``, or run ``reward_command``.

        An infrastructure failure gives 0.0 with ``final_info["infra_error"] = True``.
        """
        with self._lock:
            if self._final_reward is None:
                self._final_reward = self._grade()
            return self._final_reward

    def close(self) -> None:
        """Release the sandbox (idempotent; never raises). The shared pool stays open for other episodes."""
        with self._lock:
            self._release()

    # ------------------------------------------------------------------ tools

    def _dispatch(self, call: ToolCall) -> str:
        args = call.arguments
        try:
            if call.name in ("execute_bash", "bash"):
                return self._bash(args.get("command", args.get("cmd")))
            if call.name in ("str_replace_editor", "file_editor"):
                return edit(self._files(), args, self.max_output_chars)
            if self.stateful_python and call.name in ("code_interpreter", "python"):
                return self._python(args.get("code"))
        except InvalidRequest as exc:  # the model's request was bad (a path, say): tell it
            return f"Error: {exc.message}"
        except SandboxError as exc:
            self._fail(exc)
            return format_error(exc)
        except Exception as exc:  # a bug must end the episode cleanly, not kill the engine's thread
            log.exception("tool %s failed unexpectedly", call.name)
            self._fail(exc)
            return format_error(exc)
        return f"Error: unknown tool {call.name!r}; use execute_bash, str_replace_editor or submit."

    def _bash(self, command: Any) -> str:
        if not isinstance(command, str) or not command.strip():
            return "Error: execute_bash needs a non-empty 'command' string."
        result = self._exec(self.workspace.command(command))
        return self.workspace.output(format_result(result, max_chars=self.max_output_chars))

    def _python(self, code: Any) -> str:
        if not isinstance(code, str) or not code.strip():
            return "Error: code_interpreter needs a non-empty 'code' string."
        session = self._session_or_fail()
        result = self._call(lambda _p: run_cell(session, code, self.timeout_s))
        return format_cell(result, max_chars=self.max_output_chars)

    def _exec(self, command: str) -> ExecResult:
        session = self._session_or_fail()
        result: ExecResult = self._call(lambda _p: session.exec(command, cwd=self.paths.cwd, timeout_s=self.timeout_s))
        return result

    def _read(self, rel: str) -> bytes | None:
        session = self._session_or_fail()
        path = self.paths.fs_path(rel)
        files: dict[str, bytes] = self._call(lambda _p: session.read_files([path]))
        return files.get(path)

    def _write(self, rel: str, text: str) -> None:
        session = self._session_or_fail()
        self._call(lambda _p: session.write_files({self.paths.fs_path(rel): text.encode("utf-8")}))

    # ------------------------------------------------------------------ grading

    def _grade(self) -> float:
        reward, self.final_info = grade_episode(self.task, self.layout, self._files(), self.paths, self._call)
        return reward

    def _files(self) -> EpisodeFiles:
        return EpisodeFiles(self.workspace, self._read, self._write, self._exec)

    def _run_at_home(self, session: Session, command: str) -> ExecResult:
        """``command`` in the sandbox's own default directory (to find where the workspace is)."""
        result: ExecResult = self._call(lambda _p: session.exec(command, timeout_s=self.timeout_s))
        return result

    def _absolute_paths(self) -> bool:
        try:
            return bool(getattr(self.handle.pool.backend.capabilities, "absolute_paths", False))
        except SandboxkitError:
            return False

    # ------------------------------------------------------------------ plumbing

    def _call(self, fn: Any) -> Any:
        return self.handle.call(fn, self.deadline_s + GRACE_S)

    def _session_or_fail(self) -> Session:
        if self._session is None:
            raise SandboxError("the episode has no sandbox; call reset() first", backend=self.handle.backend_name)
        return self._session

    def _fail(self, exc: BaseException) -> None:
        log.warning("sandbox env on %s failed: %s", self.handle.backend_name, exc)
        self.infra_error = str(exc) or type(exc).__name__
        self._release()

    def _infra_info(self) -> dict[str, Any]:
        return {"infra_error": True, "error": self.infra_error}

    def _release(self) -> None:
        session, self._session = self._session, None
        if session is None or not self.handle.created:
            return
        try:
            self.handle.call(lambda _p: session.close(), self.deadline_s + GRACE_S)
        except Exception:
            log.warning("releasing the sandbox of an episode failed", exc_info=True)

    def _task_files(self) -> dict[str, bytes]:
        out = {self.paths.sandbox_path(path): body for path, body in input_files(self.task, self.layout).items()}
        raw = self.task.get("files") or {}
        if isinstance(raw, str):
            raw = json.loads(raw)
        if not isinstance(raw, Mapping):
            raise ValueError("task 'files' must be a mapping of path -> text")
        for path, body in raw.items():
            out[self.workspace.relative(str(path))] = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        return out

    def _problem_statement(self) -> str:
        for key in ("problem_statement", "question", "prompt"):
            value = self.task.get(key)
            if isinstance(value, str):
                return value
        return ""
