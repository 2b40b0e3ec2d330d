#!/usr/bin/env bash
# Set up a fresh machine for sandboxkit: system packages, a virtualenv with the package, and
# (with --all) everything the full test suite needs: toolchains, trainers, a Docker engine and
# its offline base image. Idempotent: steps already done are skipped. Needs root for apt. Ends with
# `sandboxkit doctor --strict`, which runs every promised toolchain once and fails naming what is missing.
#
#   bash scripts/bootstrap.sh          # core + subprocess backend (enough for `sandboxkit grade`)
#   bash scripts/bootstrap.sh --all    # everything the test suite uses, every language's toolchain
#                                      # (lists in scripts/toolchains.sh) and the Docker image
#
# SANDBOXKIT_DOCKER=0 leaves out the Docker engine and images (a chroot or container that cannot run an
# engine); the Docker tests then fail under CI=true, as they should.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=0
[ "${1:-}" = "--all" ] && ALL=1
DOCKER=${SANDBOXKIT_DOCKER:-1}
log() { echo "[bootstrap] $*" >&2; }
PY=${PYTHON:-python3}

# --- system packages: install only what is missing (a binary may come from elsewhere) -------
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v g++ >/dev/null 2>&1 || need+=(g++)
[ -x /usr/bin/node ] || need+=(nodejs)
[ -x /usr/bin/javac ] || need+=(default-jdk-headless)
[ -x /usr/bin/python3 ] || need+=(python3-minimal)
# Debian splits venv's pip bootstrap out of python3: without python3-venv, `python3 -m venv` fails.
if [ ! -x .venv/bin/python ] && ! "$PY" -c "import ensurepip" >/dev/null 2>&1; then need+=(python3-venv); fi
if [ "$ALL" = 1 ]; then
  # System-wide toolchains: a rustup/go install under /root is invisible to the sandbox's user.
  [ -x /usr/bin/go ] || need+=(golang-go)
  [ -x /usr/bin/rustc ] || need+=(rustc)
  [ "$DOCKER" = 0 ] || command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  command -v ps >/dev/null 2>&1 || need+=(procps)
  command -v file >/dev/null 2>&1 || need+=(file)  # the rootfs tests tell static binaries from dynamic ones
  command -v wrk >/dev/null 2>&1 || need+=(wrk)  # bench serve: HTTP load generator
  command -v curl >/dev/null 2>&1 || need+=(curl)  # the server tests scrape /metrics as the README's `curl` does
  [ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need+=(busybox-static)  # tiny root filesystems for the rootfs tests
fi
if [ "$ALL" = 1 ]; then
  # The other languages' toolchains and the libraries sandboxed programs import (scripts/toolchains.sh).
  . scripts/toolchains.sh
  # shellcheck disable=SC2046,SC2086
  need+=($(missing_debs $SANDBOXKIT_LANG_PACKAGES $SANDBOXKIT_SANDBOX_PYTHON_PACKAGES))
  # npm installs the pinned packages (tsx, jest, lodash); nodesource's nodejs brings it, Debian's does not.
  if [ -n "$SANDBOXKIT_SANDBOX_NPM_PACKAGES" ] && ! command -v npm >/dev/null 2>&1; then need+=(npm); fi
fi
if [ "${#need[@]}" -gt 0 ]; then
  log "apt-get install ${need[*]}"
  started=$SECONDS
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  log "apt-get took $((SECONDS - started))s"
fi
if [ "$ALL" = 1 ]; then
  log "npm packages for sandboxed programs in $SANDBOXKIT_NODE_PREFIX"
  started=$SECONDS
  install_sandbox_npm_packages
  log "npm took $((SECONDS - started))s"
  install_go_module_cache  # testify & co. as Go modules, offline (scripts/toolchains.sh)
fi

# --- virtualenv ---------------------------------------------------------------------------
if [ "$ALL" = 1 ]; then  # Harbor's runner (Python 3.12, a venv of its own): network bound, so alongside the rest
  log "making .venv-harbor in the background (log: harbor-venv.log)"
  bash scripts/harbor-venv.sh >harbor-venv.log 2>&1 &
  harbor_venv=$!
fi
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
PIP=".venv/bin/pip install -q --disable-pip-version-check"
if [ "$ALL" = 1 ]; then
  # torch first and pinned: the machine has a local CPU wheel; anything else pulls GBs of CUDA.
  .venv/bin/python -c "import torch" 2>/dev/null || $PIP "torch==2.13.0"
  # The echo test plugin is NOT installed here: tests install it into a temporary directory
  # (tests/support/plugin_dist.py), so a user's `sandboxkit backends` never lists it.
  log "installing sandboxkit[all] + verl 0.9.1"
  $PIP -e ".[all]" "verl==0.9.1"
  if [ "$DOCKER" = 0 ]; then
    log "SANDBOXKIT_DOCKER=0: no Docker engine nor images"
  else
    log "starting Docker and building the base image"
    bash scripts/docker-setup.sh
    log "building the small test images (busybox only, Debian without Python) and the static runner"
    bash scripts/docker-test-images.sh
    .venv/bin/python -c "from sandboxkit.backends.docker._static import static_runner; static_runner()" ||
      log "the static runner did not build (the Docker tests of images without Python will fail)"
  fi
else
  log "installing sandboxkit"
  $PIP -e .
fi
# Prove what was installed rather than trust it: every toolchain this script promised runs one program
# inside a sandbox (each backend's), and any that does not run fails the set-up, by name.
if [ "$ALL" = 1 ]; then
  harbor_rc=0
  wait "$harbor_venv" || harbor_rc=$?
  if [ "$harbor_rc" = 3 ]; then  # no Python 3.12 here: Harbor cannot be installed, and its tests will say so
    log "no python3.12 for Harbor's runner (.venv-harbor not made): $(tail -n 1 harbor-venv.log)"
  elif [ "$harbor_rc" != 0 ]; then
    log ".venv-harbor failed:"; tail -n 20 harbor-venv.log >&2; exit 1
  fi
fi
log "checking every promised toolchain inside the sandboxes (sandboxkit doctor --strict)"
started=$SECONDS
if [ "$ALL" = 1 ] && [ "$DOCKER" != 0 ]; then
  .venv/bin/sandboxkit doctor --strict
elif [ "$ALL" = 1 ]; then
  .venv/bin/sandboxkit doctor --strict --no-docker
else
  # The light set-up promises these toolchains, not the libraries --all adds (javatuples, matplotlib...).
  .venv/bin/sandboxkit doctor --strict --no-docker --no-libraries -l python -l bash -l c -l cpp -l javascript -l java
fi
log "doctor --strict took $((SECONDS - started))s"
log "done"
