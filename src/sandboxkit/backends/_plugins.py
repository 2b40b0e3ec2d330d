"""Entry-point plugins of the built-in backends.

Each built-in backend is advertised through the ``sandboxkit.backends`` entry-point group,
exactly as a third-party plugin would be. The specs name their classes as strings, so
looking a backend up imports only that backend's module, and its SDK only when it opens.
Each names its options model in :mod:`sandboxkit.configs`, so options are checked before
the backend is built.
"""

from __future__ import annotations

from collections.abc import Sequence

from sandboxkit.hookspecs import hookimpl
from sandboxkit.registry import BackendSpec


class _Builtin:
    def __init__(self, spec: BackendSpec) -> None:
        self.spec = spec

    @hookimpl
    def sandboxkit_backends(self) -> Sequence[BackendSpec]:
        return [self.spec]


def _builtin(name: str, config: str, factory: str, summary: str, *, sdk: str | None = None) -> _Builtin:
    """A built-in backend's plugin: its options model in :mod:`sandboxkit.configs`, its class in
    ``sandboxkit.<factory>``, and ``sdk``, the module it needs, named like the extra that installs it."""
    return _Builtin(
        BackendSpec(
            name=name,
            config=f"sandboxkit.configs:{config}",
            factory=f"sandboxkit.{factory}",
            extra=sdk,
            modules=(sdk,) if sdk else (),
            summary=summary,
        )
    )


subprocess = _builtin(
    "subprocess",
    "SubprocessConfig",
    "backends.subprocess:SubprocessBackend",
    "local processes isolated with namespaces and rlimits (no extra needed)",
)
docker = _builtin(
    "docker",
    "DockerConfig",
    "backends.docker:DockerBackend",
    "hardened local Docker containers with a warm in-container runner",
    sdk="docker",
)
sandbox_fusion = _builtin(
    "sandbox_fusion",
    "SandboxFusionConfig",
    "backends.sandbox_fusion:SandboxFusionBackend",
    "a Sandbox Fusion-compatible /run_code HTTP service (stateless)",
)
daytona = _builtin(
    "daytona",
    "DaytonaConfig",
    "backends.daytona:DaytonaBackend",
    "Daytona cloud sandboxes through the daytona SDK",
    sdk="daytona",
)
e2b = _builtin("e2b", "E2BConfig", "backends.e2b:E2BBackend", "E2B cloud sandboxes through the e2b SDK", sdk="e2b")
ray = _builtin(
    "ray",
    "RayConfig",
    "distributed.placement:RayPlacedBackend",
    "another backend's sandboxes on the Ray nodes with free CPUs (options: inner=...)",
    sdk="ray",
)
