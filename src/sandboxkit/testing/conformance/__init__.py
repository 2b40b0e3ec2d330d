"""The behaviour every backend must show, as a pytest test class to subclass.

Usage, in a test module of the backend's project::

    from sandboxkit.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "mybackend"
        backend_options = {"region": "test"}
        xfail = {"test_stateful_files": "the service keeps no state between calls"}

Every test opens the backend fresh and closes it. Override :meth:`~ConformanceBase.create_backend`
when the backend needs a fixture (a server URL, a fake service) and
:meth:`~ConformanceBase.live_sandboxes` to let the suite check that nothing is left behind after
``close``. Set ``contained = False`` when programs run unsandboxed on the test machine (a loopback
fake of a cloud service): the tests whose programs attack the sandbox then skip.

The suite is split by concern: run/exec/file semantics (``_semantics``), the documented errors
(``_contract``), the limits a backend declares (``_limits``), programs that attack sandboxkit's
own machinery (``_attacks``), attacks on grading through the judge (``_blame``), link-swap races against the host's file operations (``_races``), live output callbacks (``_streaming``) and checkpoint/fork (``_fork``). A behaviour added to the contract is added here first; each built-in
backend runs this suite in sandboxkit's own tests, with a reasoned ``xfail`` entry for anything it
cannot do.
"""

from __future__ import annotations

from sandboxkit.testing.conformance._attacks import AttackTests
from sandboxkit.testing.conformance._base import TIMEOUT_GRACE_S, ConformanceBase
from sandboxkit.testing.conformance._blame import BlameTests
from sandboxkit.testing.conformance._contract import ContractTests
from sandboxkit.testing.conformance._fork import ForkTests
from sandboxkit.testing.conformance._limits import LimitTests
from sandboxkit.testing.conformance._races import RaceTests
from sandboxkit.testing.conformance._semantics import SemanticsTests
from sandboxkit.testing.conformance._streaming import StreamingTests

__all__ = [
    "TIMEOUT_GRACE_S",
    "AttackTests",
    "BackendConformance",
    "BlameTests",
    "ConformanceBase",
    "ContractTests",
    "ForkTests",
    "LimitTests",
    "RaceTests",
    "SemanticsTests",
    "StreamingTests",
]


class BackendConformance(
    SemanticsTests, ContractTests, LimitTests, AttackTests, BlameTests, RaceTests, StreamingTests, ForkTests
):
    """Subclass as ``Test<Name>`` and set ``backend_name``; pytest collects the inherited tests."""
