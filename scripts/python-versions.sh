#!/usr/bin/env bash
# Test sandboxkit on every Python that pyproject.toml's classifiers name besides the main one (.venv, where
# scripts/bootstrap.sh --all installs everything and the whole suite runs), each in a venv of its own
# (.venv312, .venv313). The classifiers are the one list: a version added there is tested here.
#
#   bash scripts/python-versions.sh            # every other classified version
#   bash scripts/python-versions.sh 3.12       # only that one
#   bash scripts/python-versions.sh --prepare  # only make the venvs (CI starts this first, in the background:
#                                              # the installs wait on the network while the main suite runs)
#
# Interpreters: pyenv's ($(pyenv root)/versions/3.12.*), else python3.12 on PATH; a missing one fails.
# What runs (CI's 45 minutes hold the whole suite on 3.11 and this): tests that need no torch (trl and verl
# import it; its CPU wheel on this machine is for 3.11 only, and PyPI's pulls GBs of CUDA) and no Docker
# engine (the same code on every Python; its tests run on the main one): see SUBSET and SMOKE below.
# Needs the package registry (pip) the first time; a venv that exists is reused, its install refreshed.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[python-versions] $*" >&2; }

EXTRAS="dev,server,docker,daytona,e2b,rllm,ray"
# Pins for what breaks on these versions only:
#   filelock<3.30: from 3.30 on Python >= 3.12, os.fork raises RuntimeError ("os.fork is unsafe while filelock
#   is changing descriptor ownership") while another thread is inside filelock; the subprocess backend forks
#   from threads (pool.fork's user-namespace helper, _idmap.py), so tests/unit/test_pool_fork.py failed there.
PINS=("filelock<3.30")
# The judge (its harness runs in the sandbox's python3, whatever Python the host runs), the subprocess
# backend's conformance suite, and the unit tests; the newest version runs the unit tests only.
SUBSET=(tests/unit tests/judge tests/conformance/test_subprocess.py)
SMOKE=(tests/unit)

classified() {  # the 3.x versions pyproject.toml's classifiers name, oldest first
  sed -n 's/.*"Programming Language :: Python :: \(3\.[0-9][0-9]*\)".*/\1/p' pyproject.toml | sort -t. -k2 -n
}
find_python() {  # find_python 3.12: an interpreter of that version, or nothing
  local root candidate
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  for candidate in "$root"/versions/"$1".*/bin/python"$1" "$(command -v "python$1" || true)"; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

PREPARE_ONLY=0
[ "${1:-}" = "--prepare" ] && { PREPARE_ONLY=1; shift; }
# The main version: .venv's, or the interpreter scripts/bootstrap.sh will make it with.
main_python=.venv/bin/python
[ -x "$main_python" ] || main_python=${PYTHON:-python3}
main_version=$("$main_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)
mapfile -t versions < <(if [ "$#" -gt 0 ]; then printf '%s\n' "$@"; else classified | grep -vx "$main_version"; fi)
newest=$(classified | tail -n 1)
[ "${#versions[@]}" -gt 0 ] || { log "no version to test besides $main_version"; exit 0; }
prepare() {  # prepare VERSION VENV: the venv with sandboxkit and the extras installed (log in VENV.log)
  local py
  py=$(find_python "$1") || { log "python$1 not found (pyenv install $1, or put python$1 on PATH)"; return 1; }
  if ! "$2/bin/python" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$1'.split('.'))))" 2>/dev/null; then
    "$py" -m venv --clear "$2" && "$2/bin/pip" install -q --disable-pip-version-check --upgrade pip || return 1
  fi
  "$2/bin/pip" install -q --disable-pip-version-check -e ".[$EXTRAS]" "${PINS[@]}"
}

# The installs wait on the network, not the CPU: all at once, then the tests one version at a time.
started=$SECONDS
pids=()
for version in "${versions[@]}"; do
  venv=".venv${version/./}"
  log "preparing $venv (log: $venv.log)"
  prepare "$version" "$venv" >"$venv.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!versions[@]}"; do
  wait "${pids[i]}" || { log "preparing python ${versions[i]} failed:"; tail -n 20 ".venv${versions[i]/./}.log" >&2; rc=1; }
done
log "venvs ready in $((SECONDS - started))s"
[ "$rc" = 0 ] && [ "$PREPARE_ONLY" = 0 ] || exit "$rc"
for version in "${versions[@]}"; do
  venv=".venv${version/./}"
  tests=("${SUBSET[@]}")
  [ "$version" = "$newest" ] && tests=("${SMOKE[@]}")
  started=$SECONDS
  log "python $version: pytest ${tests[*]}"
  CI=true "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not docker" "${tests[@]}" || rc=1
  log "python $version: tests took $((SECONDS - started))s"
done
exit "$rc"
