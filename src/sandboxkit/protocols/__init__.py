"""Wire protocols shared by a client backend and a server, so neither imports the other.

A protocol module imports only :mod:`sandboxkit.models`, :mod:`sandboxkit.errors`,
:mod:`sandboxkit.languages` and :mod:`sandboxkit.output` (tests/unit/test_layers.py holds it to that).
"""
