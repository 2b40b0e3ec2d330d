"""A stateless ``code_interpreter`` for verl's ``multi_turn.function_tool_path`` (verl >= 0.8).

verl executes this file and collects the functions decorated with ``@function_tool``. Each call
runs in a fresh sandbox; configure the backend with ``SANDBOXKIT_*`` environment variables
(``SANDBOXKIT_BACKEND=docker``...). For files that persist across calls use ``SandboxTool``
from ``sandbox_tool_config.yaml`` instead (the two cannot share the name ``code_interpreter``).
"""

from verl.tools.function_tool import function_tool

from sandboxkit.integrations.verl import code_interpreter

function_tool(code_interpreter)
