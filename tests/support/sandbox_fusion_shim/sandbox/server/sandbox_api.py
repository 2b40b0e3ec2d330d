"""The request/response models Sandbox Fusion's tests build and parse: sandboxkit's wire models."""

from sandboxkit.protocols.sandbox_fusion import RunCodeRequest, RunCodeResponse, RunStatus
from sandboxkit.server.jupyter import RunJupyterRequest, RunJupyterResponse

__all__ = ["RunCodeRequest", "RunCodeResponse", "RunJupyterRequest", "RunJupyterResponse", "RunStatus"]
