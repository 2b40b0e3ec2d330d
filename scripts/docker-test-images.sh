#!/usr/bin/env bash
# Build the two small offline images the Docker tests run the conformance suite on, to show that
# the backend needs nothing from an image (issue 15):
#
#   sandboxkit-busybox:latest   only a static busybox (/bin/busybox and its applet links): no libc,
#                               no bash, no Python. From Debian's busybox-static package.
#   sandboxkit-nopython:latest  Debian without Python: bash, dash, coreutils, grep, sed, findutils,
#                               tar and their libraries (the apt dependency closure), unpacked with
#                               dpkg-deb (nothing is configured or run).
#
# Idempotent (an image that exists is kept; SANDBOXKIT_DOCKER_REBUILD=1 rebuilds). Needs root,
# a running engine (scripts/docker-setup.sh) and the apt sources this machine uses; no registry.
# About 10 s (two small downloads and unpacking, in parallel).
# Downloaded packages are cached in $SANDBOXKIT_CACHE_DIR/debs (default ~/.cache/sandboxkit/debs).
set -euo pipefail
BUSYBOX_IMAGE="${SANDBOXKIT_BUSYBOX_IMAGE:-sandboxkit-busybox:latest}"
NOPYTHON_IMAGE="${SANDBOXKIT_NOPYTHON_IMAGE:-sandboxkit-nopython:latest}"
CACHE="${SANDBOXKIT_CACHE_DIR:-$HOME/.cache/sandboxkit}/debs"
NOPYTHON_PKGS="bash coreutils dash grep sed findutils tar"
log() { echo "[docker-test-images] $*" >&2; }

have() { [ "${SANDBOXKIT_DOCKER_REBUILD:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }

mkdir -p "$CACHE"
WORK=$(mktemp -d /tmp/sandboxkit-test-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Both images: the workspace mount point, a sandbox user, Docker's usual environment.
finish() { # root image
  mkdir -p "$1/work" "$1/tmp" "$1/etc"
  chmod 1777 "$1/tmp"
  grep -q '^sandbox:' "$1/etc/passwd" 2>/dev/null || echo 'sandbox:x:1000:1000::/work:/bin/sh' >>"$1/etc/passwd"
  tar -C "$1" -c . | docker import \
    --change "ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "WORKDIR /work" \
    --change "LABEL sandboxkit.test-image=$3" \
    - "$2" >/dev/null
}

build_busybox() {
  local started root deb
  started=$(date +%s)
  deb=$(find "$CACHE" -name 'busybox-static_*.deb' | head -n 1)
  if [ -z "$deb" ]; then
    (cd "$CACHE" && { apt-get download busybox-static >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get download busybox-static >/dev/null 2>&1; }; })
    deb=$(find "$CACHE" -name 'busybox-static_*.deb' | head -n 1)
  fi
  [ -n "$deb" ] || { log "could not download busybox-static"; return 1; }
  root="$WORK/busybox"
  dpkg-deb -x "$deb" "$WORK/busybox-deb"
  mkdir -p "$root/bin"
  cp "$WORK/busybox-deb/bin/busybox" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
  done
  finish "$root" "$BUSYBOX_IMAGE" busybox
  log "built $BUSYBOX_IMAGE in $(($(date +%s) - started))s"
}

build_nopython() {
  local started root pkgs
  started=$(date +%s)
  root="$WORK/nopython"
  # The dependency closure of a shell and the basic tools (no Python in it), unpacked as is.
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $NOPYTHON_PKGS 2>/dev/null | grep -v '^[ <]' | sort -u)
  [ -n "$pkgs" ] || { apt-get update -qq && pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances $NOPYTHON_PKGS 2>/dev/null | grep -v '^[ <]' | sort -u); }
  if echo "$pkgs" | grep -q '^python'; then
    log "refusing: the package closure holds Python ($(echo "$pkgs" | grep '^python' | paste -sd' ' -))"
    return 1
  fi
  mkdir -p "$CACHE/nopython" "$root"
  # shellcheck disable=SC2086
  (cd "$CACHE/nopython" && apt-get download $pkgs >/dev/null 2>&1) || {
    log "could not download: $pkgs"
    return 1
  }
  for deb in "$CACHE"/nopython/*.deb; do dpkg-deb -x "$deb" "$root"; done
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
  finish "$root" "$NOPYTHON_IMAGE" nopython
  log "built $NOPYTHON_IMAGE in $(($(date +%s) - started))s"
}

pids=()
if have "$BUSYBOX_IMAGE"; then log "image $BUSYBOX_IMAGE already present"; else build_busybox & pids+=($!); fi
if have "$NOPYTHON_IMAGE"; then log "image $NOPYTHON_IMAGE already present"; else build_nopython & pids+=($!); fi
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
exit $rc
