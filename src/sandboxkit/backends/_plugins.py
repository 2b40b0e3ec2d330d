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


subprocess = _Builtin(
    BackendSpec(
        name="subprocess",
        config="sandboxkit.configs:SubprocessConfig",
        factory="sandboxkit.backends.subprocess:SubprocessBackend",
        summary="local processes isolated with namespaces and rlimits (no extra needed)",
    )
)
docker = _Builtin(
    BackendSpec(
        name="docker",
        config="sandboxkit.configs:DockerConfig",
        factory="sandboxkit.backends.docker:DockerBackend",
        extra="docker",
        modules=("docker",),
        summary="hardened local Docker containers with a warm in-container runner",
    )
)
sandbox_fusion = _Builtin(
    BackendSpec(
        name="sandbox_fusion",
        config="sandboxkit.configs:SandboxFusionConfig",
        factory="sandboxkit.backends.sandbox_fusion:SandboxFusionBackend",
        summary="a Sandbox Fusion-compatible /run_code HTTP service (stateless)",
    )
)
daytona = _Builtin(
    BackendSpec(
        name="daytona",
        config="sandboxkit.configs:DaytonaConfig",
        factory="sandboxkit.backends.daytona:DaytonaBackend",
        extra="daytona",
        modules=("daytona",),
        summary="Daytona cloud sandboxes through the daytona SDK",
    )
)
e2b = _Builtin(
    BackendSpec(
        name="e2b",
        config="sandboxkit.configs:E2BConfig",
        factory="sandboxkit.backends.e2b:E2BBackend",
        extra="e2b",
        modules=("e2b",),
        summary="E2B cloud sandboxes through the e2b SDK",
    )
)
ray = _Builtin(
    BackendSpec(
        name="ray",
        config="sandboxkit.configs:RayConfig",
        factory="sandboxkit.distributed.placement:RayPlacedBackend",
        extra="ray",
        modules=("ray",),
        summary="another backend's sandboxes on the Ray nodes with free CPUs (options: inner=...)",
    )
)
