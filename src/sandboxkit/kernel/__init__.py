"""Stateful Python kernels: one persistent interpreter per sandbox, cells run one at a time.

Use it through :meth:`Session.python <sandboxkit.session.Session.python>`; backends start the
in-sandbox program through :class:`Kernel` and a :class:`KernelLink` (see ``docs/kernels.md``).
"""

from sandboxkit.kernel._client import Kernel, KernelLink, PipeLink, describe_shell, kernel_argv, process_tree
from sandboxkit.kernel._models import CellResult, CellStatus

__all__ = [
    "CellResult",
    "CellStatus",
    "Kernel",
    "KernelLink",
    "PipeLink",
    "describe_shell",
    "kernel_argv",
    "process_tree",
]
