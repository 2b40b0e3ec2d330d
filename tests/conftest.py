"""Shared fixtures. ``tests/`` is on sys.path (pytest ``pythonpath``), so helpers import as ``support.<topic>``.

Where test code lives:

* ``tests/support/<topic>.py``: every helper module (backends that record or fail on purpose,
  subprocess/engine leak checks, ``sandboxkit serve`` as a process, availability marks). One
  place and one naming scheme, imported as ``from support.<topic> import ...``.
* ``tests/fakes/``: loopback fakes of external services (Daytona, E2B) driven by their real SDKs.
* ``sandboxkit.testing``: what ships to users (the conformance suite, ``FakeBackend``).
"""

from __future__ import annotations
