#!/usr/bin/env bash
# The multi-process pool under suites written for one process: every pool built from a backend name or a
# registry-made backend gets two host workers (SANDBOXKIT_POOL_PROCESSES=2, docs/multiprocess.md), so the
# subprocess conformance suite, the blame suite (TRL and verl adapters, sessions beside pooled runs) and the
# grading tests run through the workers and the shared limiter. CI runs it after the main suite (.ci/run);
# tests/backends/subprocess/test_subprocess_multiprocess.py (hostile programs, a killed worker, the soak)
# runs in the main suite itself.
#
#   bash scripts/multiprocess-subset.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
SUBSET=(tests/conformance/test_subprocess.py tests/judge/test_blame.py tests/judge/test_grade.py)
SANDBOXKIT_POOL_PROCESSES=2 .venv/bin/python -m pytest -q -p no:cacheprovider "${SUBSET[@]}" "$@"
