"""Whether Ray can be used in this process, asked without importing Ray at ``import sandboxkit``.

Its own module because the package (``ray_limiter``) and ``placement`` (``availability``) both
ask; kept out of the package's ``__init__`` so ``placement`` does not import the package that
re-exports it.
"""

from __future__ import annotations

__all__ = ["ray_ready"]


def ray_ready() -> tuple[bool, str]:
    """``(True, "")`` when Ray is installed and initialised here, else ``(False, why and what to do)``."""
    try:
        import ray
    except ImportError:
        return False, 'Ray is not installed (pip install "sandboxkit[ray]")'
    if not ray.is_initialized():
        return False, "Ray is not initialised in this process (call ray.init() first)"
    return True, ""
