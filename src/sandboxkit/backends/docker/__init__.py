"""``docker``: hardened local containers, each with a warm runner so a run costs milliseconds.

See :mod:`sandboxkit.backends.docker._backend` for the options and ``docs/backends/docker.md``
for how it works and how to run its tests. The docker SDK is imported only when a backend
is used, never by importing this package.
"""

from sandboxkit.backends.docker._backend import DEFAULT_IMAGE, IMAGE_ENV, DockerBackend
from sandboxkit.backends.docker._sandbox import DockerSandbox

__all__ = ["DEFAULT_IMAGE", "IMAGE_ENV", "DockerBackend", "DockerSandbox"]
