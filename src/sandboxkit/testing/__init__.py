"""Test helpers shipped with sandboxkit: the backend conformance suite and a scriptable fake backend.

``from sandboxkit.testing import BackendConformance`` and subclass it in your tests (see
:mod:`sandboxkit.testing.conformance`); ``FakeBackend`` (:mod:`sandboxkit.testing.fake`) stands in for
a sandbox when testing code that uses sandboxkit. Importing this module imports pytest.
"""

from sandboxkit.testing.conformance import BackendConformance
from sandboxkit.testing.fake import FakeBackend, FakeSandbox

__all__ = ["BackendConformance", "FakeBackend", "FakeSandbox"]
