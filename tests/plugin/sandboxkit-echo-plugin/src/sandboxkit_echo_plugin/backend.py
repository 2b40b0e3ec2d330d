"""EchoBackend: the smallest complete Backend (no isolation: it never executes anything)."""

import uuid

from sandboxkit import Backend, Capabilities, ExecResult, RunResult, Sandbox, Status


class EchoSandbox(Sandbox):
    def __init__(self):
        self.id = f"echo-{uuid.uuid4().hex[:8]}"
        self.backend_name = "echo"
        self.open = True

    async def run(self, request):
        return RunResult(status=Status.OK, exit_code=0, stdout=request.code, backend="echo", sandbox_id=self.id)

    async def exec(self, command, *, cwd=None, env=None, stdin=None, timeout=None):
        return ExecResult(status=Status.OK, exit_code=0, stdout=str(command))

    async def write_files(self, files):
        return None

    async def read_files(self, paths):
        return {}

    async def alive(self):
        return self.open

    async def close(self):
        self.open = False


class EchoBackend(Backend):
    name = "echo"

    @property
    def capabilities(self):
        return Capabilities(languages=frozenset({"python"}), stateful=False, resettable=False)

    async def open(self, limits=None):
        return EchoSandbox()
