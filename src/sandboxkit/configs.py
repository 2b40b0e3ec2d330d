"""Typed backend options: one pydantic ``<Backend>Config`` per built-in backend.

A backend used to take ``**options`` straight into its constructor, so a typo
(``imgae="..."``) surfaced as a ``TypeError`` from deep inside pool construction. Each
config here names every option its backend accepts, with ``extra="forbid"``, so a typo is
an :class:`~sandboxkit.errors.InvalidRequest` that lists the valid keys, before anything
is built. The ``kind`` literal makes the configs one discriminated union
(:data:`BackendConfig`), so a YAML or JSON mapping such as ``{"kind": "docker", "image":
"python:3.12"}`` parses to the right model.

Configs import no SDK (only pydantic, like SWE-ReX's deployment configs): naming a
``DaytonaConfig`` works without the daytona SDK installed; the SDK is imported only when
the backend is built. A config's defaults are its backend constructor's defaults, and a
guard test keeps the two in step. Only the options a user actually set are passed on
(:meth:`BaseBackendConfig.options`), so a constructor that reads an environment variable
when an option is absent still does.

Use::

    from sandboxkit import SandboxPool
    from sandboxkit.configs import DockerConfig

    async with SandboxPool(DockerConfig(image="python:3.12-slim", network="none")) as pool:
        ...

A plugin may declare its own config (a subclass of :class:`BaseBackendConfig` named by
``BackendSpec(config=...)``); a plugin without one keeps receiving plain keyword options.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, TypeAdapter, ValidationError, model_validator

__all__ = [
    "BUILTIN_CONFIGS",
    "BackendConfig",
    "BaseBackendConfig",
    "DaytonaConfig",
    "DockerConfig",
    "E2BConfig",
    "RayConfig",
    "SandboxFusionConfig",
    "SubprocessConfig",
    "explain_errors",
    "parse_backend_config",
]


class BaseBackendConfig(BaseModel):
    """Common base of every backend config: unknown keys are refused, values are validated.

    Subclasses set ``kind`` to a ``Literal`` of the backend's registered name, with that
    name as the default, and declare one field per keyword of the backend's constructor.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str

    def options(self) -> dict[str, Any]:
        """Keyword arguments for the backend's constructor: only the options that were set."""
        return self.model_dump(exclude={"kind"}, exclude_unset=True)

    @classmethod
    def option_names(cls) -> list[str]:
        """Every option this config accepts (``kind`` aside), sorted."""
        return sorted(name for name in cls.model_fields if name != "kind")


def explain_errors(model: type[BaseBackendConfig], exc: ValidationError) -> str:
    """One line per problem of a failed validation, a close match offered for an unknown key."""
    valid = model.option_names()
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(options)"
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(error["loc"][0]), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown option {key!r}{hint}")
        elif error["loc"]:
            problems.append(f"option {key!r}={error.get('input')!r}: {error['msg']}")
        else:
            problems.append(str(error.get("ctx", {}).get("error", error["msg"])))
    return "; ".join(problems)


class SubprocessConfig(BaseBackendConfig):
    """Options of the ``subprocess`` backend (local processes in namespaces, rlimits and cgroups)."""

    kind: Literal["subprocess"] = "subprocess"
    root: str | None = None
    """Directory holding the per-sandbox workspaces (default: ``$TMPDIR/sandboxkit-<uid>``)."""
    path: str | None = None
    """``PATH`` inside the sandbox (default: the standard system directories)."""
    warm_python: bool = True
    """Keep a warm Python fork server per sandbox (much faster Python runs)."""
    disk_mb: int = Field(1024, gt=0)
    """Size of each sandbox's tmpfs workspace in MiB (when tmpfs is available)."""
    tmp_mb: int = Field(256, gt=0)
    """Size of each sandbox's private ``/tmp`` in MiB."""
    preload_modules: tuple[str, ...] | None = None
    """Modules the fork server imports before its first command (None: the backend's ``DEFAULT_PRELOAD``)."""
    seccomp: bool = True
    """Refuse dangerous system calls (keyring, io_uring, bpf, mounts...) with a seccomp filter."""
    rootfs: str | None = None
    """Root filesystem of every sandbox: a directory or a tarball (``docker export``); a private overlay each."""
    rootfs_cache: str | None = None
    """Where root filesystems are unpacked, keyed by sha256 (default ``~/.cache/sandboxkit/rootfs``)."""
    workdir: str | None = None
    """Working directory: inside the root filesystem (default ``/testbed``) with ``rootfs``, else where
    bubblewrap binds the workspace (default ``/work``)."""


class DockerConfig(BaseBackendConfig):
    """Options of the ``docker`` backend (hardened local containers with a warm runner)."""

    kind: Literal["docker"] = "docker"
    image: str | None = None
    """Image to run (default: ``$SANDBOXKIT_DOCKER_IMAGE``, else ``sandboxkit-base:latest``)."""
    workdir: str = "/work"
    """Absolute workspace directory inside the container."""
    workdir_size_mb: int = Field(512, gt=0)
    """Size of the workspace tmpfs in MiB."""
    tmp_size_mb: int = Field(64, gt=0)
    """Size of ``/tmp`` in MiB."""
    network: str = "bridge"
    """Docker network of sandboxes that are allowed the network (others get none)."""
    python_fast: bool = True
    """Run Python in the warm in-container runner instead of a fresh interpreter."""
    labels: dict[str, str] | None = None
    """Extra labels put on every container."""
    base_url: str | None = None
    """Docker engine URL (default: the environment's, e.g. ``DOCKER_HOST``)."""
    start_timeout_s: float = Field(60.0, gt=0)
    """How long a container may take to start."""
    grace_s: float = Field(5.0, gt=0)
    """How much longer than a run's limit the host waits for the runner."""
    writable_root: bool = False
    """Writable root filesystem: files may be written at absolute paths outside the workspace (no reuse after reset)."""
    writable_dirs: tuple[str, ...] = ()
    """Absolute directories created at open and given to the program's user (needs ``writable_root``)."""
    runner: Literal["auto", "static", "python"] | None = None
    """In-container runner: ``python`` (needs python3 in the image; has the Python fast path),
    ``static`` (a static Go binary mounted read-only; any image), or ``auto`` (default, or
    ``$SANDBOXKIT_DOCKER_RUNNER``): ``python``, and ``static`` where the image cannot run it."""


class SandboxFusionConfig(BaseBackendConfig):
    """Options of the ``sandbox_fusion`` backend (a Sandbox Fusion-compatible ``/run_code`` service)."""

    kind: Literal["sandbox_fusion"] = "sandbox_fusion"
    url: str | None = None
    """Service URL, e.g. ``http://host:8080`` (default: ``$SANDBOX_FUSION_URL``)."""
    languages: list[str] | None = None
    """Languages the service runs (default: every language Sandbox Fusion supports)."""
    retries: int = Field(0, ge=0)
    """Retries of one HTTP request inside the backend (the pool retries too)."""
    backoff_base: float = Field(0.1, ge=0)
    """First backoff between those retries, in seconds."""
    request_grace_s: float = Field(30.0, gt=0)
    """How much longer than a run's limit one request may take."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """TCP connect timeout."""
    max_connections: int = Field(256, gt=0)
    """HTTP connections kept open to the service."""
    headers: dict[str, str] | None = None
    """Extra HTTP headers sent with every request (e.g. an auth token)."""


class _CloudConfig(BaseBackendConfig):
    """Options every cloud backend takes (its constructor's shared keywords)."""

    api_key: SecretStr | None = None
    """API key (default: the service's ``*_API_KEY`` variable); never shown in reprs or errors."""
    api_url: str | None = None
    """API URL (default: the service's ``*_API_URL`` variable, else its cloud)."""
    create_timeout_s: float = Field(60.0, gt=0)
    """How long one creation may take before it is abandoned and cleaned up."""
    grace_s: float = Field(15.0, gt=0)
    """How much longer than a run's limit the host waits for the service."""
    languages: list[str] | None = None
    """Languages the image or template can run (default: all of sandboxkit's)."""


class DaytonaConfig(_CloudConfig):
    """Options of the ``daytona`` backend (Daytona cloud sandboxes)."""

    kind: Literal["daytona"] = "daytona"
    target: str | None = None
    """Region (default: ``$DAYTONA_TARGET``, else the organisation's default)."""
    snapshot: str | None = None
    """Snapshot to create sandboxes from."""
    image: str | None = None
    """Create sandboxes from this image instead (needed for cpu / memory_gb / disk_gb)."""
    cpu: int | None = Field(None, gt=0)
    """CPUs per sandbox (image-based sandboxes only)."""
    memory_gb: int | None = Field(None, gt=0)
    """Memory per sandbox in GiB (image-based sandboxes only)."""
    disk_gb: int | None = Field(None, gt=0)
    """Disk per sandbox in GiB (image-based sandboxes only)."""
    auto_stop_minutes: int = Field(15, ge=0)
    """An idle sandbox stops (and is deleted) after this long; the backstop against leaks."""
    ttl_minutes: int | None = Field(None, gt=0)
    """Hard wall-clock lifetime of a sandbox (None = no limit)."""
    labels: dict[str, str] | None = None
    """Extra labels put on every sandbox."""
    connection_pool_maxsize: int | None = Field(None, gt=0)
    """HTTP pool size of the SDK (None = the SDK's default)."""


class E2BConfig(_CloudConfig):
    """Options of the ``e2b`` backend (E2B cloud sandboxes)."""

    kind: Literal["e2b"] = "e2b"
    domain: str | None = None
    """E2B domain (default: ``$E2B_DOMAIN``, else ``e2b.app``)."""
    sandbox_url: str | None = None
    """envd URL override for every sandbox (default: ``$E2B_SANDBOX_URL``)."""
    template: str | None = None
    """Template to create sandboxes from (default: E2B's ``base``)."""
    sandbox_timeout_s: int = Field(600, gt=0)
    """Sandbox lifetime, renewed while in use; bounds how long a leaked sandbox bills."""
    request_timeout_s: float = Field(30.0, gt=0)
    """Timeout of one control-plane or envd request."""
    metadata: dict[str, str] | None = None
    """Extra metadata put on every sandbox."""
    user: str | None = None
    """Sandbox user commands run as (default: the template's)."""
    http_version: Literal["1.1", "2"] | None = None
    """HTTP version of the SDK (default: ``$E2B_HTTP_VERSION``, else the SDK's)."""


class RayConfig(BaseBackendConfig):
    """Options of the ``ray`` placement backend (another backend's sandboxes on Ray nodes with free CPUs)."""

    kind: Literal["ray"] = "ray"
    inner: str = "subprocess"
    """The backend to host: a registered name or a ``"module:Class"`` string."""
    inner_options: dict[str, Any] | None = None
    """Options of the inner backend (checked against its config when it is a built-in)."""
    num_cpus: float = Field(1.0, gt=0)
    """CPUs each open sandbox reserves in Ray's accounting."""
    memory_mb: int | None = Field(None, gt=0)
    """Memory each sandbox reserves in Ray's accounting (None: none)."""
    resources: dict[str, float] | None = None
    """Extra custom Ray resources per sandbox, e.g. ``{"grader": 1}``."""
    scheduling_strategy: str = "DEFAULT"
    """Ray's scheduling strategy for the hosts (``DEFAULT`` or ``SPREAD``)."""
    runtime_env: dict[str, Any] | None = None
    """Ray runtime environment of the host actors."""

    @model_validator(mode="after")
    def _check_inner_options(self) -> RayConfig:
        # A typo in a built-in inner backend's options would otherwise surface on a remote node.
        inner = BUILTIN_CONFIGS.get(self.inner.strip().lower().replace("-", "_"))
        if inner is not None and self.inner_options:
            try:
                inner.model_validate(self.inner_options)
            except ValidationError as exc:
                raise ValueError(
                    f"inner_options of {self.inner!r}: {explain_errors(inner, exc)}. "
                    f"Valid inner options: {', '.join(inner.option_names())}"
                ) from None
        return self


#: The config model of each built-in backend, by registered name.
BUILTIN_CONFIGS: dict[str, type[BaseBackendConfig]] = {
    "subprocess": SubprocessConfig,
    "docker": DockerConfig,
    "sandbox_fusion": SandboxFusionConfig,
    "daytona": DaytonaConfig,
    "e2b": E2BConfig,
    "ray": RayConfig,
}

#: Any built-in backend's config, told apart by ``kind`` (for YAML / JSON / env input).
BackendConfig = Annotated[
    SubprocessConfig | DockerConfig | SandboxFusionConfig | DaytonaConfig | E2BConfig | RayConfig,
    Field(discriminator="kind"),
]

_ADAPTER: TypeAdapter[Any] | None = None


def parse_backend_config(data: Any) -> BaseBackendConfig:
    """A built-in backend's config from a mapping with a ``kind`` key (or a config, returned as is).

    For any backend, plugins included, and for error messages that name the valid keys, use
    :func:`sandboxkit.registry.backend_config` instead.

    Raises:
        pydantic.ValidationError: the mapping has no known ``kind`` or an invalid option.
    """
    global _ADAPTER
    if isinstance(data, BaseBackendConfig):
        return data
    if _ADAPTER is None:
        _ADAPTER = TypeAdapter(BackendConfig)
    config: BaseBackendConfig = _ADAPTER.validate_python(data)
    return config
