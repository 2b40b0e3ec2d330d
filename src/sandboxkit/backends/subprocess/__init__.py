"""The subprocess backend: isolated local processes, the default that needs nothing installed.

See ``docs/backends/subprocess.md`` for the isolation layers and what each protects.
"""

from sandboxkit.backends.subprocess._backend import SubprocessBackend, SubprocessSandbox

__all__ = ["SubprocessBackend", "SubprocessSandbox"]
