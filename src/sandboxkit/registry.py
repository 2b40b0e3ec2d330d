"""Backend discovery: pluggy hooks advertised through ``sandboxkit.backends`` entry points.

Nothing is loaded at import. The first lookup loads the entry points (small plugin
objects), collects their :class:`BackendSpec` s, and a backend's module is imported only
when that backend is constructed. A plugin that fails to load is reported with a
warning, never silently dropped.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pluggy

from sandboxkit import hookspecs
from sandboxkit.base import Availability, Backend
from sandboxkit.errors import BackendNotFound, BackendUnavailable

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendSpec",
    "available_backends",
    "backend",
    "backend_class",
    "plugin_manager",
]

ENTRY_POINT_GROUP = "sandboxkit.backends"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendSpec:
    """How to build a backend, without importing it.

    Attributes:
        name: the name users pass (``SandboxPool("docker")``).
        factory: the backend class, or ``"module:Class"`` imported on first use.
        extra: the ``sandboxkit[...]`` extra that installs its SDK, if any.
        modules: top-level modules the backend needs; missing ones make it unusable.
        summary: one line for ``sandboxkit backends``.
    """

    name: str
    factory: str | Callable[..., Backend]
    extra: str | None = None
    modules: tuple[str, ...] = ()
    summary: str = ""
    plugin: str = field(default="", compare=False)

    def missing_modules(self) -> list[str]:
        """Required modules that are not importable here."""
        return [m for m in self.modules if importlib.util.find_spec(m) is None]

    def load(self) -> type[Backend] | Callable[..., Backend]:
        """Import and return the factory.

        Raises:
            BackendUnavailable: the backend's SDK (extra) is not installed, or its module fails to import.
        """
        missing = self.missing_modules()
        if missing:
            hint = f'pip install "sandboxkit[{self.extra}]"' if self.extra else f"pip install {' '.join(missing)}"
            raise BackendUnavailable(
                f"backend {self.name!r} needs {', '.join(missing)}, which is not installed; run: {hint}",
                backend=self.name,
            )
        if not isinstance(self.factory, str):
            return self.factory
        module_name, _, attr = self.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
            return getattr(module, attr)  # type: ignore[no-any-return]
        except (ImportError, AttributeError) as exc:
            raise BackendUnavailable(
                f"backend {self.name!r} could not be loaded from {self.factory!r}: {exc}; "
                "reinstall the package that provides it",
                backend=self.name,
            ) from exc

    def availability(self, **options: Any) -> Availability:
        """Whether this backend can be used here, and why not (never raises)."""
        try:
            factory = self.load()
        except BackendUnavailable as exc:
            return Availability(False, exc.message)
        check = getattr(factory, "availability", None)
        if check is None:
            return Availability(True)
        try:
            result: Availability = check(**options)
            return result
        except Exception as exc:  # a plugin's probe must not break `sandboxkit backends`
            return Availability(False, f"availability check failed: {exc!r}")


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
                    specs[spec.name] = BackendSpec(
                        spec.name, spec.factory, spec.extra, spec.modules, spec.summary, plugin=impl.plugin_name
                    )
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


def backend(name: str, **options: Any) -> Backend:
    """Construct the backend registered under ``name`` with ``options``.

    Raises:
        BackendNotFound: no backend has that name (the message lists the installed ones).
        BackendUnavailable: its SDK is not installed or it cannot work here.
        InvalidRequest: an option is not accepted by the backend.
    """
    from sandboxkit.errors import InvalidRequest

    factory = _spec(name).load()
    try:
        return factory(**options)
    except TypeError as exc:
        raise InvalidRequest(f"backend {name!r} rejected its options {sorted(options)!r}: {exc}", backend=name) from exc
