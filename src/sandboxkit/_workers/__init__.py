"""Host worker processes behind one pool (``SandboxPool(..., processes=N)``).

One Python process drives a few thousand runs per second at most: each pooled run costs its
event loop a fraction of a millisecond. A pool with ``processes=N`` starts N worker processes,
each with its own loop and backend, behind the pool's one limiter, so the pool's caps,
deadlines, metrics, result order and error types stay what they are in one process while the
host's work spreads over N cores. See docs/multiprocess.md.

Modules: ``_spec`` (how many workers, how a worker rebuilds the backend), ``_wire`` (the
socket between parent and worker), ``_shared`` (the parent's one limiter), ``_set`` (the
parent's workers and the calls sent to them), ``_remote`` and ``_main`` (the worker's side).
Nothing is imported here, so the registry can record recipes without loading the rest.
"""
