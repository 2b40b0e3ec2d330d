"""Moved: the scriptable fake backend ships in :mod:`sandboxkit.testing.fake`.

Kept as a re-export so test modules that still import it from here (tests/unit/test_pool.py is
being edited on another branch) keep working; new code imports ``sandboxkit.testing.FakeBackend``.
"""

from sandboxkit.testing.fake import FakeBackend, FakeSandbox

__all__ = ["FakeBackend", "FakeSandbox"]
