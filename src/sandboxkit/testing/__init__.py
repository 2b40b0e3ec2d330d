"""Test helpers shipped with sandboxkit: the backend conformance suite.

``from sandboxkit.testing import BackendConformance`` and subclass it in your tests; see
:mod:`sandboxkit.testing.conformance`. Importing this module imports pytest.
"""

from sandboxkit.testing.conformance import BackendConformance

__all__ = ["BackendConformance"]
