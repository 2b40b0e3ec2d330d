"""``from sandbox.runners import CommandRunStatus``: sandboxkit's copy of the wire enum."""

from sandboxkit.protocols.sandbox_fusion import CommandRunStatus

__all__ = ["CommandRunStatus"]
