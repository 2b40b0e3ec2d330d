"""Typed backend options: one pydantic ``<Backend>Config`` per built-in backend.

A backend used to take ``**options`` straight into its constructor, so a typo
(``imgae="..."``) surfaced as a ``TypeError`` from deep inside pool construction. Each
config here names every option its backend accepts, with ``extra="forbid"``, so a typo is
an :class:`~sandboxkit.errors.InvalidRequest` that lists the valid keys, before anything
is built. The ``kind`` literal makes the configs one discriminated union
(:data:`BackendConfig`), so a YAML or JSON mapping such as ``{"kind": "docker", "image":
"python:3.12"}`` parses to the right model.

Each option is declared once, here: its type, its bounds, its default and (as the field's
docstring) what it means. Everything else derives from the field. A backend's constructor
takes its config (``SubprocessBackend(config=SubprocessConfig(tmp_mb=32))``) or keyword
options that it hands to :meth:`BaseBackendConfig.from_options`, so
``SubprocessBackend(tmp_mb=32)`` is validated by the same model, with the same error, as
``SandboxPool("subprocess", backend_options={"tmp_mb": 32})``. The option tables in
``docs/backends/`` are rendered from the fields (:func:`options_table`), and a test keeps
them in step in that one direction. An option whose default depends on the machine (an
environment variable, a probe) defaults to ``None`` here and is resolved by the backend.

Configs import no SDK (only pydantic, like SWE-ReX's deployment configs): naming a
``DaytonaConfig`` works without the daytona SDK installed; the SDK is imported only when
the backend is built. :meth:`BaseBackendConfig.options` gives only the options a user set,
for plugins whose constructors take plain keywords.

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
import posixpath
import warnings
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from sandboxkit.errors import InvalidRequest
from sandboxkit.models import check_sandbox_path

__all__ = [
    "BUILTIN_CONFIGS",
    "DEFAULT_PRELOAD",
    "BackendConfig",
    "BaseBackendConfig",
    "CloudConfig",
    "DaytonaConfig",
    "DockerConfig",
    "E2BConfig",
    "RayConfig",
    "SandboxFusionConfig",
    "SubprocessConfig",
    "explain_errors",
    "invalid_options",
    "options_table",
    "parse_backend_config",
]


class BaseBackendConfig(BaseModel):
    """Common base of every backend config: unknown keys are refused, values are validated.

    Subclasses set ``kind`` to a ``Literal`` of the backend's registered name, with that
    name as the default, and declare one field per option, documented by a docstring under
    it (``use_attribute_docstrings`` makes that the field's description, which the docs
    tables and the JSON schema show).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: str

    #: Old names of options renamed to say their unit (``backoff_base`` -> ``backoff_base_s``): still
    #: accepted for one release, with a :class:`DeprecationWarning`.
    renamed_options: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _accept_old_names(cls, data: Any) -> Any:
        if not cls.renamed_options or not isinstance(data, Mapping):
            return data
        data = dict(data)
        for old in cls.renamed_options:
            if old in data:
                if f"{old}_s" in data:
                    raise ValueError(f"pass {old}_s= only ({old}= is its deprecated old name)")
                warnings.warn(
                    f"{cls.__name__}: {old}= is deprecated; use {old}_s= (the same seconds)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                data[f"{old}_s"] = data.pop(old)
        return data

    @classmethod
    def backend_name(cls) -> str:
        """The registered name of the backend this config is for (the ``kind`` default)."""
        return str(cls.model_fields["kind"].default)

    @classmethod
    def from_options(cls, config: BaseBackendConfig | None = None, options: Mapping[str, Any] | None = None) -> Self:
        """What a backend's constructor works from: ``config``, with keyword ``options`` validated over it.

        A backend constructor is ``__init__(self, config=None, **options)`` and calls this first,
        so keyword calls (``DockerBackend(image="x")``) and configs go through the same model
        and the constructor neither repeats a default nor checks a value by hand. A config
        given alone is used as it is (the registry validated it already).

        Raises:
            InvalidRequest: ``config`` is another backend's, or an option is unknown or invalid;
                the message names the backend, the option and the valid ones (see :func:`invalid_options`).
        """
        if config is not None and not isinstance(config, cls):
            raise InvalidRequest(
                f"backend {cls.backend_name()!r} takes a {cls.__name__}, got {type(config).__name__}; "
                f"pass {cls.__name__}(...) or plain keyword options",
                backend=cls.backend_name(),
            )
        if config is not None and not options:
            return config
        data = {**(config.options() if config is not None else {}), **(options or {})}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise invalid_options(cls.backend_name(), cls, exc) from None

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
            problems.append(f"option {key!r}={error.get('input')!r}: {error['msg'].removeprefix('Value error, ')}")
        else:
            problems.append(str(error.get("ctx", {}).get("error", error["msg"])))
    return "; ".join(problems)


def invalid_options(name: str, model: type[BaseBackendConfig], exc: ValidationError) -> InvalidRequest:
    """The error for options ``model`` refused: the backend, each problem (from pydantic), the valid options."""
    return InvalidRequest(
        f"backend {name!r} rejected its options: {explain_errors(model, exc)}. "
        f"Valid options: {', '.join(model.option_names())}",
        backend=name,
    )


def _absolute(value: str | None, option: str) -> str | None:
    """``value`` when it is an absolute path below ``/`` without ``..`` (a field check)."""
    if value is not None and (not posixpath.isabs(value) or value == "/" or ".." in value.split("/")):
        raise ValueError(f"{option} must be an absolute path below '/' without '..'")
    return value


#: Modules the subprocess fork server imports before its first command (``preload_modules``): what test
#: harnesses and competitive-programming solutions import, so a warm run finds them loaded.
#: Kept to modules that cost little: every preloaded page makes each fork (every run) a little
#: dearer, so heavier ones (``dataclasses`` ~2.5 MB, ``tempfile``, ``fractions``, ``hashlib``) are
#: for callers that import them in every run (``preload_modules=[...]``). ``random`` is left out
#: on purpose: once loaded, every forked child re-seeds it (an at-fork hook), ~15 copied pages a run.
#: ``traceback`` (~0.3 MB, with linecache/tokenize) and ``copy`` (~0.15 MB) are left out too: the
#: judge's harness imports ``traceback`` only when a solution raises, and few programs use ``copy``;
#: preloaded, they made every warm slot bigger and every run a little slower (docs/benchmarks.md).
#: ``typing`` stays: the judge's prelude imports it for LeetCode-style annotations (``List[int]``).
DEFAULT_PRELOAD = (
    "bisect", "collections", "functools", "heapq", "io", "itertools", "json", "math", "operator",
    "re", "string", "typing",
)  # fmt: skip


class SubprocessConfig(BaseBackendConfig):
    """Options of the ``subprocess`` backend (local processes in namespaces, rlimits and cgroups)."""

    kind: Literal["subprocess"] = "subprocess"
    root: str | None = None
    """Directory holding the per-sandbox workspaces (default: ``$TMPDIR/sandboxkit-<uid>``)."""
    path: str | None = None
    """``PATH`` inside the sandbox, never the host's (default: the standard system directories)."""
    warm_python: bool = True
    """Run Python in a child forked from a warm interpreter, one fork server per sandbox (about a millisecond
    a run instead of an interpreter start)."""
    disk_mb: int = Field(1024, gt=0)
    """Size of each sandbox's tmpfs workspace in MiB, its disk quota (where mounting a tmpfs is allowed)."""
    tmp_mb: int = Field(256, gt=0)
    """Size of each sandbox's private ``/tmp`` and ``/dev/shm`` in MiB."""
    preload_modules: tuple[str, ...] = DEFAULT_PRELOAD
    """Modules the fork server imports before its first command, so warm runs (and the judge's harness) find
    them loaded (``()``: none, the smallest and fastest server; ``None``: the default). Each preloaded MiB
    makes every fork a little dearer, so heavy modules are opt-in. Only the server's own imports happen
    before untrusted code exists, which is why this is a backend option and not something a run can ask for."""
    seccomp: bool = True
    """Refuse dangerous system calls (keyring, io_uring, bpf, mounts...) with a seccomp filter (needs
    bubblewrap)."""
    rootfs: str | None = None
    """Root filesystem of every sandbox: a directory or a tarball (``docker export``), unpacked once; each
    sandbox runs on its own copy-on-write view, so absolute paths are real and private (needs root and
    bubblewrap)."""
    rootfs_cache: str | None = None
    """Where root filesystems are unpacked, one directory per sha256 (default ``~/.cache/sandboxkit/rootfs``)."""
    workdir: str | None = None
    """Where programs start and relative paths point: inside the root filesystem (default ``/testbed``) with
    ``rootfs``, else where bubblewrap binds the workspace (default ``/work``), so literal paths like
    ``/testbed/data.txt`` in program files work."""

    @field_validator("workdir")
    @classmethod
    def _sandbox_directory(cls, workdir: str | None) -> str | None:
        # Where it may go also depends on the machine (bubblewrap, the host's directories): the backend checks that.
        if workdir is None:
            return None
        checked = check_sandbox_path(workdir, absolute_ok=True)
        if not checked.startswith("/") or checked.split("/")[1] in ("tmp", "dev", "proc", "sys"):
            raise ValueError("workdir must be an absolute directory outside /tmp, /dev, /proc and /sys")
        return checked

    @field_validator("preload_modules", mode="before")
    @classmethod
    def _default_when_none(cls, modules: object) -> object:
        return DEFAULT_PRELOAD if modules is None else modules

    @field_validator("preload_modules")
    @classmethod
    def _module_names(cls, modules: tuple[str, ...]) -> tuple[str, ...]:
        bad = [m for m in modules if not all(part.isidentifier() for part in m.split("."))]
        if bad:
            raise ValueError(f"not module names: {bad!r}; give names like ['json', 'numpy']")
        return modules


class DockerConfig(BaseBackendConfig):
    """Options of the ``docker`` backend (hardened local containers with a warm runner)."""

    kind: Literal["docker"] = "docker"
    image: str | None = None
    """Image to run (default: ``$SANDBOXKIT_DOCKER_IMAGE``, else ``sandboxkit-base:latest``, built offline by
    ``scripts/docker-setup.sh``). Any image works (see ``runner``); it needs the toolchains of the languages
    you use."""
    workdir: str = "/work"
    """Absolute workspace directory inside the container."""
    workdir_size_mb: int = Field(512, gt=0)
    """Size of the workspace tmpfs in MiB (tmpfs pages count against the memory limit)."""
    tmp_size_mb: int = Field(64, gt=0)
    """Size of ``/tmp`` in MiB."""
    network: str = "bridge"
    """Docker network of sandboxes whose limits allow the network (the others get ``network_mode=none``)."""
    python_fast: bool = True
    """Run Python in a child forked from the warm in-container runner (~10x faster; Python runner only)
    instead of ``python3 -u main.py`` like the other languages."""
    labels: dict[str, str] | None = None
    """Extra labels put on every container; they also scope ``cleanup`` (default:
    ``$SANDBOXKIT_DOCKER_LABELS``, ``k=v,k2=v2``)."""
    base_url: str | None = None
    """Docker engine URL (default: the environment's, e.g. ``DOCKER_HOST``)."""
    start_timeout_s: float = Field(60.0, gt=0)
    """How long a new container may take to start and say hello."""
    grace_s: float = Field(5.0, gt=0)
    """How much longer than a run's limit the host waits for the runner before the container is stuck."""
    writable_root: bool = False
    """Writable root filesystem: files may be written at absolute paths outside the workspace
    (``/tests/test.sh``); what a program writes there survives ``reset``, so such sandboxes are not reused."""
    writable_dirs: tuple[str, ...] = ()
    """Absolute directories created at open and given to the program's user, e.g.
    ``("/testbed", "/logs/verifier")`` (needs ``writable_root``)."""
    runner: Literal["auto", "static", "python"] | None = None
    """In-container runner: ``python`` (needs python3 >= 3.8 in the image; has the Python fast path),
    ``static`` (a static Go binary mounted read-only, built once or ``$SANDBOXKIT_RUNNER_BIN``; any image),
    or ``auto`` (default, or ``$SANDBOXKIT_DOCKER_RUNNER``): ``python``, and ``static`` for good where the
    image cannot run it."""

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, workdir: str) -> str:
        return _absolute(workdir, "workdir") or workdir


class SandboxFusionConfig(BaseBackendConfig):
    """Options of the ``sandbox_fusion`` backend (a Sandbox Fusion-compatible ``/run_code`` service)."""

    kind: Literal["sandbox_fusion"] = "sandbox_fusion"
    renamed_options: ClassVar[tuple[str, ...]] = ("backoff_base",)
    url: str | None = None
    """Service URL: its base (``http://host:8080``) or the full ``.../run_code`` URL (default:
    ``$SANDBOX_FUSION_URL``)."""
    languages: list[str] | None = None
    """sandboxkit language names the service runs (default: every language Sandbox Fusion names: python,
    cpp, javascript, java, go, rust, bash)."""
    retries: int = Field(0, ge=0)
    """Extra attempts of one HTTP request inside the backend on a transient fault (0: the pool retries)."""
    backoff_base_s: float = Field(0.1, ge=0)
    """First backoff between those attempts, in seconds (it doubles, with full jitter)."""
    request_grace_s: float = Field(30.0, gt=0)
    """Added to a run's compile and run limits to make the HTTP read timeout; a service that stalls past
    it is a transient fault."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """TCP connect timeout."""
    max_connections: int = Field(256, gt=0)
    """HTTP connections kept open to the service."""
    headers: dict[str, str] | None = None
    """Extra HTTP headers sent with every request (e.g. an auth token)."""


class CloudConfig(BaseBackendConfig):
    """Options every cloud backend takes (what :class:`~sandboxkit.backends._cloud_backend.CloudBackend` reads)."""

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


class DaytonaConfig(CloudConfig):
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
    auto_stop_minutes: int | None = Field(None, ge=0)
    """A sandbox whose owner stopped renewing it stops (and is deleted) after this long; the backstop
    against leaks. None: the pool's dead-man TTL rounded up to whole minutes (Daytona's unit);
    0: never (only ``cleanup`` then removes a crashed trainer's sandboxes)."""
    ttl_minutes: int | None = Field(None, gt=0)
    """Hard wall-clock lifetime of a sandbox (None = no limit)."""
    labels: dict[str, str] | None = None
    """Extra labels put on every sandbox."""
    connection_pool_maxsize: int | None = Field(None, gt=0)
    """HTTP pool size of the SDK (None = the SDK's default)."""

    @model_validator(mode="after")
    def _resources_need_an_image(self) -> DaytonaConfig:
        if (self.cpu or self.memory_gb or self.disk_gb) and not self.image:
            raise ValueError(
                "Daytona applies cpu/memory_gb/disk_gb only to sandboxes built from an image; "
                "pass image=... or size the snapshot instead"
            )
        return self


class E2BConfig(CloudConfig):
    """Options of the ``e2b`` backend (E2B cloud sandboxes)."""

    kind: Literal["e2b"] = "e2b"
    domain: str | None = None
    """E2B domain (default: ``$E2B_DOMAIN``, else ``e2b.app``)."""
    sandbox_url: str | None = None
    """envd URL override for every sandbox (default: ``$E2B_SANDBOX_URL``)."""
    template: str | None = None
    """Template to create sandboxes from (default: E2B's ``base``)."""
    sandbox_timeout_s: int | None = Field(None, gt=0, le=86_400)
    """E2B's timeout of each sandbox, renewed while its owner lives; bounds how long a crashed trainer's
    sandboxes bill (E2B caps it at 1 h on Hobby, 24 h on Pro). None: the pool's dead-man TTL (its
    ``deadline_s``, else ``timeout_s + compile_timeout_s``), as for the local backends."""
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


def _shown_default(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{value!r}`"


def options_table(model: type[BaseBackendConfig]) -> str:
    """The Markdown table of ``model``'s options (name, default, meaning) in declaration order, as the docs show it.

    Rendered from the fields alone, so a new option, a changed default or a reworded docstring
    reaches the docs by re-rendering (``scripts/option-tables.py``); a test fails while a
    table differs from this. An option whose default is ``None`` shows ``–``: its meaning
    says what the backend uses then.
    """
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for name in (name for name in model.model_fields if name != "kind"):  # declaration order: related ones together
        field = model.model_fields[name]
        meaning = " ".join((field.description or "").split()).replace("``", "`").replace("|", "\\|")
        rows.append(f"| `{name}` | {_shown_default(field.default)} | {meaning} |")
    return "\n".join(rows) + "\n"
