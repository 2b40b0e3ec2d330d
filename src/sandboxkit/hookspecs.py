"""Hook specifications for backend plugins (pluggy).

A plugin is any object or module with functions named after these specs, marked with
``sandboxkit.hookimpl``, and advertised under the ``sandboxkit.backends`` entry-point
group::

    # pyproject.toml of a plugin distribution
    [project.entry-points."sandboxkit.backends"]
    mybackend = "my_pkg.plugin"

    # my_pkg/plugin.py
    from sandboxkit import BackendSpec, hookimpl

    @hookimpl
    def sandboxkit_backends():
        return [BackendSpec(name="mybackend", factory="my_pkg.backend:MyBackend")]

The built-in backends register the same way, through this package's own entry points.
:class:`BackendSpec`, what the hook returns, lives here beside it (``sandboxkit.registry`` and
``sandboxkit`` re-export it), so the registry depends on the hooks and not the other way round.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

from sandboxkit.base import Availability, Backend
from sandboxkit.errors import BackendUnavailable

if TYPE_CHECKING:  # configs are imported when options are first checked, not at `import sandboxkit`
    from sandboxkit.configs import BaseBackendConfig

__all__ = ["BackendSpec", "hookimpl", "hookspec"]

PROJECT = "sandboxkit"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True)
class BackendSpec:
    """How to build a backend, without importing it.

    Attributes:
        name: the name users pass (``SandboxPool("docker")``).
        factory: the backend class, or ``"module:Class"`` imported on first use.
        extra: the ``sandboxkit[...]`` extra that installs its SDK, if any.
        modules: top-level modules the backend needs; missing ones make it unusable.
        summary: one line for ``sandboxkit backends``.
        plugin: the plugin that registered it (filled in by the registry).
        config: the backend's options model, a :class:`~sandboxkit.configs.BaseBackendConfig`
            subclass or ``"module:Class"``; ``None`` passes options through unchecked.
    """

    name: str
    factory: str | Callable[..., Backend]
    extra: str | None = None
    modules: tuple[str, ...] = ()
    summary: str = ""
    plugin: str = field(default="", compare=False)
    config: str | type[BaseBackendConfig] | None = field(default=None, compare=False)

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
        return self._import(self.factory, "could not be loaded from")  # type: ignore[no-any-return]

    def _import(self, ref: str, what: str) -> Any:
        """The object a ``"module:attr"`` reference names.

        Raises:
            BackendUnavailable: it cannot be imported (the message names the backend and the reference).
        """
        module_name, _, attr = ref.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise BackendUnavailable(
                f"backend {self.name!r} {what} {ref!r}: {exc}; reinstall the package that provides it",
                backend=self.name,
            ) from exc

    def load_config(self) -> type[BaseBackendConfig] | None:
        """The options model of this backend, or ``None`` when it declares none.

        Raises:
            BackendUnavailable: the named model cannot be imported (a broken plugin).
        """
        from sandboxkit.configs import BaseBackendConfig

        if self.config is None or not isinstance(self.config, str):
            return self.config
        model = self._import(self.config, "could not load its config")
        if not (isinstance(model, type) and issubclass(model, BaseBackendConfig)):
            raise BackendUnavailable(
                f"backend {self.name!r} names config {self.config!r}, which is not a BaseBackendConfig subclass; "
                "fix the plugin's BackendSpec(config=...)",
                backend=self.name,
            )
        return model

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


@hookspec
def sandboxkit_backends() -> Sequence[BackendSpec]:  # type: ignore[empty-body]
    """Return the backends this plugin provides.

    Called once, the first time a backend is looked up by name. Import nothing heavy
    here: name the backend class as a ``"module:Class"`` string so its SDK is imported only
    when the backend is actually used. Returning ``None`` or an empty list means "none".
    """
