"""Backend discovery: pluggy hooks advertised through ``sandboxkit.backends`` entry points.

Nothing is loaded at import. The first lookup loads the entry points (small plugin
objects), collects their :class:`BackendSpec` s, and a backend's module is imported only
when that backend is constructed. A plugin that fails to load is reported with a
warning, never silently dropped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import pluggy
from pydantic import ValidationError

from sandboxkit import hookspecs
from sandboxkit._workers._spec import Recipe, remember
from sandboxkit.base import Backend
from sandboxkit.errors import BackendNotFound, InvalidRequest
from sandboxkit.hookspecs import BackendSpec

if TYPE_CHECKING:  # configs are imported when options are first checked, not at `import sandboxkit`
    from sandboxkit.configs import BaseBackendConfig

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendSpec",
    "available_backends",
    "backend",
    "backend_class",
    "backend_config",
    "config_model",
    "parse_backend_options",
    "plugin_manager",
]

ENTRY_POINT_GROUP = "sandboxkit.backends"
log = logging.getLogger(__name__)


_lock = threading.Lock()
_pm: pluggy.PluginManager | None = None
_specs: dict[str, BackendSpec] | None = None


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with entry points loaded on first use."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT)
            pm.add_hookspecs(hookspecs)
            _load_entry_points(pm)
            _pm = pm
        return _pm


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            warnings.warn(
                f"sandboxkit backend plugin {ep.name!r} ({ep.value}) failed to load and is skipped: {exc!r}",
                RuntimeWarning,
                stacklevel=3,
            )
            continue
        pm.register(plugin, name=ep.name)


def available_backends() -> dict[str, BackendSpec]:
    """All registered backends by name (installed ones, usable or not), sorted by name."""
    global _specs
    pm = plugin_manager()
    with _lock:
        if _specs is None:
            specs: dict[str, BackendSpec] = {}
            for impl in pm.hook.sandboxkit_backends.get_hookimpls():
                try:
                    provided = cast("Sequence[BackendSpec]", impl.function() or [])
                except Exception as exc:
                    warnings.warn(
                        f"sandboxkit plugin {impl.plugin_name!r} failed: {exc!r}", RuntimeWarning, stacklevel=2
                    )
                    continue
                for spec in provided:
                    if spec.name in specs:
                        log.warning("backend %r registered twice; keeping %s", spec.name, specs[spec.name].plugin)
                        continue
                    specs[spec.name] = dataclasses.replace(spec, plugin=impl.plugin_name)
            _specs = dict(sorted(specs.items()))
        return _specs


def register(spec: BackendSpec) -> None:
    """Register a backend at run time (tests, notebooks). Plugins should use entry points."""
    available_backends()
    assert _specs is not None
    with _lock:
        _specs[spec.name] = spec


def _spec(name: str) -> BackendSpec:
    specs = available_backends()
    key = name.strip().lower().replace("-", "_")
    if key not in specs:
        installed = ", ".join(specs) or "none"
        raise BackendNotFound(
            f"no backend named {name!r}; installed backends: {installed}. "
            "Run `sandboxkit backends` to see which are usable, or install the plugin that provides it"
        )
    return specs[key]


def backend_class(name: str) -> type[Backend] | Callable[..., Backend]:
    """The factory registered under ``name``.

    Raises:
        BackendNotFound: no backend has that name (the message lists the installed ones).
        BackendUnavailable: its SDK is not installed.
    """
    return _spec(name).load()


def config_model(name: str) -> type[BaseBackendConfig] | None:
    """The options model of the backend registered under ``name`` (``None``: it declares none).

    Raises:
        BackendNotFound: no backend has that name.
        BackendUnavailable: the plugin's config model cannot be imported.
    """
    return _spec(name).load_config()


def backend_config(
    name: str | Mapping[str, Any] | BaseBackendConfig, options: Mapping[str, Any] | None = None
) -> BaseBackendConfig | None:
    """Validate a backend's options into its config.

    Args:
        name: a backend name, a mapping with a ``kind`` key and the options (YAML / JSON
            input), or a config (returned with ``options`` applied on top).
        options: options to validate (with a name), or to override (with a mapping or config).

    Returns:
        The config, or ``None`` when the backend declares no config model (a plugin that
        takes plain keyword options: they are passed through unchecked).

    Raises:
        BackendNotFound: no backend has that name.
        InvalidRequest: an option is unknown (the message lists the valid ones) or has a bad value.
    """
    from sandboxkit.configs import BaseBackendConfig

    extra = dict(options or {})
    if isinstance(name, BaseBackendConfig):
        if not extra:
            return name
        extra = {**name.options(), **extra}
        name = name.kind
    elif isinstance(name, Mapping):
        data = dict(name)
        kind = data.pop("kind", None)
        if not isinstance(kind, str) or not kind:
            raise InvalidRequest(
                f"a backend config needs a 'kind' naming the backend, got {dict(name)!r}; "
                f"e.g. {{'kind': 'docker', 'image': 'python:3.12'}} (installed: {', '.join(available_backends())})"
            )
        extra = {**data, **extra}
        name = kind
    model = config_model(name)
    if model is None:
        return None
    try:
        return model.model_validate(extra)
    except ValidationError as exc:
        from sandboxkit.configs import invalid_options

        raise invalid_options(_spec(name).name, model, exc) from None


def parse_backend_options(name: str, items: Sequence[str]) -> dict[str, Any]:
    """Options given as ``KEY=VALUE`` strings (command line), validated against the backend's config.

    Each value is taken as a string when the option accepts that string (``image=python:3.12``,
    ``disk_mb=512``, ``warm_python=false``), otherwise as JSON (``labels={"team": "rl"}``,
    ``ttl_minutes=null``). For a backend without a config model every value that parses as
    JSON is taken as JSON, as before.

    Returns:
        The validated options, ready for ``SandboxPool(name, backend_options=...)``.

    Raises:
        BackendNotFound: no backend has that name.
        InvalidRequest: an item is not ``KEY=VALUE``, or an option is unknown or invalid.
    """
    model = config_model(name)
    raw: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            keys = f"; valid keys of {name!r}: {', '.join(model.option_names())}" if model is not None else ""
            raise InvalidRequest(f"backend option {item!r} must look like KEY=VALUE{keys}", backend=name)
        raw[key.strip()] = value
    if model is None:
        return {key: _json_or_text(value) for key, value in raw.items()}
    options = {key: _coerce(model, key, value) for key, value in raw.items()}
    config = backend_config(name, options)
    assert config is not None
    return config.options()


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _coerce(model: type[BaseBackendConfig], key: str, value: str) -> Any:
    """``value`` as the text itself when the option takes it, else as JSON (what a shell can type)."""
    if key not in model.model_fields:
        return value  # reported as unknown, with the valid keys, by the validation that follows
    for candidate in (value, _json_or_text(value)):
        try:
            model.model_validate({key: candidate})
            return candidate
        except ValidationError as exc:
            if all(error["loc"][:1] != (key,) for error in exc.errors()):
                return candidate  # only other (required) fields complained
    return value


def backend(name: str | BaseBackendConfig, **options: Any) -> Backend:
    """Construct a backend from its name and options, or from its config.

    ``backend("docker", image="python:3.12")`` and ``backend(DockerConfig(image="python:3.12"))``
    build the same backend; options are validated against the backend's config first, so a
    typo is reported with the valid keys instead of failing inside the constructor. A backend
    class that names its model (``config_model``, as every built-in does) receives that
    validated config as ``config=``; a plugin's class without one receives the options it set
    as keywords.

    Raises:
        BackendNotFound: no backend has that name (the message lists the installed ones).
        BackendUnavailable: its SDK is not installed or it cannot work here.
        InvalidRequest: an option is unknown or invalid (the message lists the valid ones).
    """
    config = backend_config(name, options)
    key = config.kind if config is not None else cast("str", name)
    factory = _spec(key).load()
    if config is not None and isinstance(config, getattr(factory, "config_model", None) or ()):
        takes_config = cast("Callable[..., Backend]", factory)  # Backend itself declares no constructor
        made = takes_config(config=config)  # validated once, above; the constructor takes it as it is
        remember(made, Recipe(config))  # how a pool's worker process builds it again
        return made
    kwargs = config.options() if config is not None else options
    try:
        made = factory(**kwargs)
    except TypeError as exc:
        if config is not None:
            raise  # the options matched the config: this is a bug in the backend, not a typo
        raise InvalidRequest(f"backend {key!r} rejected its options {sorted(kwargs)!r}: {exc}", backend=key) from exc
    remember(made, Recipe(config if config is not None else key, {} if config is not None else dict(kwargs)))
    return made
