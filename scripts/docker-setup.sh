#!/usr/bin/env bash
# Start a Docker engine and build the offline base image sandboxkit's Docker backend uses.
# Idempotent: does nothing that is already done. Needs root (CI and dev machines here are root).
set -euo pipefail
IMAGE="${SANDBOXKIT_DOCKER_IMAGE:-sandboxkit-base:latest}"
log() { echo "[docker-setup] $*" >&2; }

if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io from apt"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  nohup dockerd >/var/log/sandboxkit-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start; see /var/log/sandboxkit-dockerd.log"; tail -n 30 /var/log/sandboxkit-dockerd.log >&2; exit 1; }
fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "image $IMAGE already present"
  exit 0
fi

MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$MIRROR" ] || MIRROR=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
ROOTFS=$(mktemp -d /tmp/sandboxkit-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
# python3 for the in-container runner; the toolchains the tests use for the language checks.
PKGS="python3-minimal,python3,coreutils,bash,procps,gcc,g++,libc6-dev"
log "debootstrap bookworm from $MIRROR (packages: $PKGS)"
debootstrap --variant=minbase --include="$PKGS" bookworm "$ROOTFS" "$MIRROR" >/tmp/sandboxkit-debootstrap.log 2>&1 || {
  tail -n 30 /tmp/sandboxkit-debootstrap.log >&2; exit 1; }
# An unprivileged user for the code (uid 1000), and a workdir it owns.
chroot "$ROOTFS" /usr/sbin/useradd -u 1000 -m -s /bin/bash sandbox 2>/dev/null || echo 'sandbox:x:1000:1000::/home/sandbox:/bin/bash' >>"$ROOTFS/etc/passwd"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" -c . | docker import - "$IMAGE" >/dev/null
log "built $IMAGE"
