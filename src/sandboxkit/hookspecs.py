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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from sandboxkit.registry import BackendSpec

__all__ = ["hookimpl", "hookspec"]

PROJECT = "sandboxkit"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def sandboxkit_backends() -> Sequence[BackendSpec]:  # type: ignore[empty-body]
    """Return the backends this plugin provides.

    Called once, the first time a backend is looked up by name. Import nothing heavy
    here: name the backend class as a ``"module:Class"`` string so its SDK is imported only
    when the backend is actually used. Returning ``None`` or an empty list means "none".
    """
