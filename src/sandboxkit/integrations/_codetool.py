"""The code tool, once: its schema, how a call's arguments are checked, and how its answer is worded.

SGLang's :class:`~sandboxkit.integrations.sglang.CodeInterpreter` and verl's
:class:`~sandboxkit.integrations.verl.SandboxTool` differ only in where a call's sandbox
comes from (one session per conversation, or one per trajectory keyed on verl's request
id). Everything else is here, so the two answer the model identically:

* a call without a non-empty ``code`` string, or with arguments that are not an object, is
  answered with an error text (a model's mistake is a training signal, not a crash);
* a model-supplied ``language`` or ``timeout`` is ignored unless allowed; an allowed
  timeout is **clamped** into ``[MIN_MODEL_TIMEOUT_S, max_timeout_s]`` and the tool output
  says so, so the model learns the bound instead of being refused;
* the program's outcome is formatted with :func:`~sandboxkit.integrations._format.format_result`,
  an infrastructure failure with :func:`~sandboxkit.integrations._format.format_error`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sandboxkit.errors import InvalidRequest
from sandboxkit.integrations._cells import format_cell
from sandboxkit.integrations._format import format_error, format_result
from sandboxkit.integrations._runtime import GRACE_S, PoolHandle
from sandboxkit.integrations._toolcalls import ToolCall, ToolCallError
from sandboxkit.kernel import CellResult
from sandboxkit.languages import resolve_language
from sandboxkit.models import RunResult
from sandboxkit.pool import SandboxPool

__all__ = ["CODE_INTERPRETER_SCHEMA", "MIN_MODEL_TIMEOUT_S", "CodeRequest", "CodeToolBase"]

log = logging.getLogger(__name__)

#: The OpenAI function schema of the code tool (the same name and argument verl's old tool used).
CODE_INTERPRETER_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": (
            "Run a program in a sandbox and return what it printed (stdout, then stderr) and how it ended. "
            "Files written by one call are still there on the next call."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The complete program to run."}},
            "required": ["code"],
        },
    },
}

#: The shortest timeout a model may ask for; shorter ones are raised to it (and the output says so).
MIN_MODEL_TIMEOUT_S = 1.0

_USAGE = 'Call {name} with a JSON object like {{"code": "print(1)"}}.'


@dataclass(frozen=True)
class CodeRequest:
    """A checked call: what to run, how, and a note for the model about what was changed."""

    code: str
    language: str
    timeout_s: float
    note: str = ""


class CodeToolBase:
    """The code tool's checks and answers, mixed into every adapter that offers ``code_interpreter``.

    A subclass sets these attributes (from its own arguments or config) and supplies ``handle``;
    :meth:`run_request` takes the function that runs a checked request on the pool, the one
    thing the adapters do differently (see the module docstring).

    Attributes:
        language: language programs run in (canonical name).
        timeout_s: seconds a program may run.
        allow_language: honour a ``language`` argument from the model.
        allow_timeout: honour a ``timeout`` argument from the model, clamped (see module docstring).
        max_timeout_s: upper bound of a model-supplied timeout, in seconds.
        max_output_chars: longest text handed back (head and tail kept).
        deadline_s: wall-clock bound on one call, queue wait included.
        tool_name: the function name the tool answers to.
        handle: where calls run.
    """

    language: str
    timeout_s: float
    allow_language: bool
    allow_timeout: bool
    max_timeout_s: float
    max_output_chars: int
    deadline_s: float
    tool_name: str
    handle: PoolHandle

    def check_call(self, call: ToolCall | ToolCallError) -> CodeRequest | str:
        """A parsed call as a request, or the error text to answer it with."""
        if isinstance(call, ToolCallError):
            return f"Error: {call.message}. {_USAGE.format(name=self.tool_name)}"
        if call.name != self.tool_name:
            return f"Error: unknown tool {call.name!r}; the available tool is {self.tool_name!r}."
        return self.check_arguments(call.arguments)

    def check_arguments(self, arguments: Any) -> CodeRequest | str:
        """The call's arguments as a request, or the error text to answer it with."""
        if not isinstance(arguments, Mapping):
            return f"Error: the arguments must be a JSON object. {_USAGE.format(name=self.tool_name)}"
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return "Error: the 'code' argument is required and must be a non-empty string."
        language, timeout, note = self.language, self.timeout_s, ""
        if self.allow_language and arguments.get("language"):
            try:
                language = resolve_language(str(arguments["language"])).name
            except InvalidRequest as exc:
                return f"Error: {exc.message}"
        if self.allow_timeout and arguments.get("timeout") is not None:
            asked = arguments["timeout"]
            try:
                wanted = float(asked)
            except (TypeError, ValueError):
                wanted = math.nan
            if isinstance(asked, bool) or math.isnan(wanted):
                return f"Error: timeout must be a number of seconds, got {asked!r}"
            low = min(MIN_MODEL_TIMEOUT_S, self.max_timeout_s)
            timeout = min(max(wanted, low), self.max_timeout_s)
            if timeout != wanted:
                bound = "maximum" if wanted > timeout else "minimum"
                note = f"[note: the requested timeout of {wanted:g}s was clamped to the {bound} of {timeout:g}s]"
        return CodeRequest(code, language, timeout, note)

    async def run_request(
        self, request: CodeRequest, run: Callable[[SandboxPool, CodeRequest], Awaitable[RunResult | CellResult]]
    ) -> tuple[str, RunResult | CellResult | None]:
        """Run ``run(pool, request)`` on the handle's pool; the answer text, and the result when there is one.

        ``run`` returns a program's result, or a cell's in the ``stateful_python`` mode (``_cells``).

        Never raises: an infrastructure failure is answered with :func:`format_error` text.
        """
        try:
            result = await self.handle.acall(
                lambda pool: run(pool, request), max(self.deadline_s, request.timeout_s) + GRACE_S
            )
        except Exception as exc:
            log.info("%s call failed: %s", self.tool_name, exc)
            return format_error(exc), None
        if isinstance(result, CellResult):
            text = format_cell(result, max_chars=self.max_output_chars)
        else:
            text = format_result(result, max_chars=self.max_output_chars)
        return (f"{text}\n{request.note}" if request.note else text), result
