#!/usr/bin/env bash
# Start a Docker engine and build the offline base image sandboxkit's Docker backend uses.
#
# Idempotent: does nothing that is already done. Needs root (CI and dev machines here are root).
# No image registry is needed: the image is a debootstrap'ed Debian bookworm (minbase) imported
# with `docker import`, from the apt mirror this machine already uses.
#
# Environment:
#   SANDBOXKIT_DOCKER_IMAGE            image name (default sandboxkit-base:latest)
#   SANDBOXKIT_DOCKER_EXTRA_PACKAGES   more Debian packages, space or comma separated, e.g.
#                                      "rustc golang-go" for Rust and Go (each adds build time)
#   SANDBOXKIT_DOCKER_FULL=1           also the heavy toolchains (R, Racket, Scala, Kotlin, C#/Mono):
#                                      every language the host runs; the image triples in size
#   SANDBOXKIT_DOCKER_LANG_PACKAGES, SANDBOXKIT_SANDBOX_PYTHON_PACKAGES, SANDBOXKIT_SANDBOX_NPM_PACKAGES
#                                      the language toolchains and preinstalled libraries
#                                      (scripts/toolchains.sh; set one empty to leave it out)
#   SANDBOXKIT_DOCKER_REBUILD=1        rebuild even if the image exists
# An existing image whose package list differs from the requested one is rebuilt.
set -euo pipefail
IMAGE="${SANDBOXKIT_DOCKER_IMAGE:-sandboxkit-base:latest}"
log() { echo "[docker-setup] $*" >&2; }

# python3 runs the in-container runner; bash, coreutils and procps serve exec(); then the toolchains of
# python, bash, c, cpp, javascript and java (rust and go are opt-in: they double the image), and those of
# the other languages plus the preinstalled Python libraries (scripts/toolchains.sh, shared with the host).
BASE_PKGS="python3-minimal,python3,coreutils,bash,procps,gcc,g++,libc6-dev,default-jdk-headless,nodejs"
cd "$(dirname "$0")/.."
. scripts/toolchains.sh
LANG_PKGS=$(echo "$SANDBOXKIT_DOCKER_LANG_PACKAGES $SANDBOXKIT_SANDBOX_PYTHON_PACKAGES" | tr ' ,' '\n\n' | sed '/^$/d' | paste -sd, -)
EXTRA=$(echo "${SANDBOXKIT_DOCKER_EXTRA_PACKAGES:-}" | tr ' ,' '\n\n' | sed '/^$/d' | sort -u | paste -sd, -)
PKGS="$BASE_PKGS${LANG_PKGS:+,$LANG_PKGS}${EXTRA:+,$EXTRA}"
# The npm packages (tsx, jest, lodash...) are copied from the host's tree, so the image builds offline.
NPM_WANT=$(echo "$SANDBOXKIT_SANDBOX_NPM_PACKAGES" | tr ' ' '\n' | sed '/^$/d' | sed 's/^/npm:/' | paste -sd, -)
# The offline Go module cache (testify...) is copied from the host's too, built there first where Go is installed;
# the image has a use for it only with golang-go (SANDBOXKIT_DOCKER_EXTRA_PACKAGES), and it is 2 MB.
GO_WANT=""
if [ -n "$SANDBOXKIT_GO_MODULES" ] && command -v go >/dev/null 2>&1 && [ -n "$(go_module_versions)" ]; then
  GO_WANT=$(go_module_versions | tr ' ' '\n' | sed 's/^/go:/' | paste -sd, -)
fi
# The image's label: no spaces, which LABEL would split on. RECIPE changes when the same packages make a
# different image (2: the node wrapper is executable; images of recipe 1 had it 644), so old images are rebuilt.
RECIPE=2
WANT="recipe:$RECIPE,$PKGS${NPM_WANT:+,$NPM_WANT}${GO_WANT:+,$GO_WANT}"

apt_install() {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
command -v dockerd >/dev/null 2>&1 || { log "installing docker.io from apt"; apt_install docker.io; }
command -v debootstrap >/dev/null 2>&1 || { log "installing debootstrap from apt"; apt_install debootstrap; }

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  nohup dockerd >/var/log/sandboxkit-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || {
    log "dockerd did not start; see /var/log/sandboxkit-dockerd.log"
    tail -n 30 /var/log/sandboxkit-dockerd.log >&2
    exit 1
  }
fi

if [ "${SANDBOXKIT_DOCKER_REBUILD:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  have=$(docker image inspect -f '{{ index .Config.Labels "sandboxkit.packages" }}' "$IMAGE" 2>/dev/null || true)
  if [ -z "$have" ] || [ "$have" = "<no value>" ] || [ "$have" = "$WANT" ]; then
    log "image $IMAGE already present"
    exit 0
  fi
  log "image $IMAGE has packages [$have], [$WANT] requested: rebuilding"
fi

MIRROR=$(debian_mirror)
ROOTFS=$(mktemp -d /tmp/sandboxkit-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
log "debootstrap bookworm from $MIRROR (packages: $PKGS)"
started=$(date +%s)
debootstrap --variant=minbase --include="$PKGS" bookworm "$ROOTFS" "$MIRROR" >/tmp/sandboxkit-debootstrap.log 2>&1 || {
  tail -n 30 /tmp/sandboxkit-debootstrap.log >&2
  exit 1
}
# An unprivileged user for the code (uid 1000); the backend runs everything as 1000:1000.
chroot "$ROOTFS" /usr/sbin/useradd -u 1000 -m -s /bin/bash sandbox 2>/dev/null ||
  echo 'sandbox:x:1000:1000::/home/sandbox:/bin/bash' >>"$ROOTFS/etc/passwd"
# The workspace mount point (the backend mounts a tmpfs volume there).
mkdir -p "$ROOTFS/work"
if [ -n "$NPM_WANT" ]; then
  install_sandbox_npm_packages || { log "cannot install the npm packages ($SANDBOXKIT_NODE_PREFIX)"; exit 1; }
  mkdir -p "$ROOTFS$(dirname "$SANDBOXKIT_NODE_PREFIX")"
  cp -a "$SANDBOXKIT_NODE_PREFIX" "$ROOTFS$SANDBOXKIT_NODE_PREFIX"
fi
if [ -n "$GO_WANT" ]; then
  install_go_module_cache || { log "cannot build the Go module cache ($SANDBOXKIT_GO_PREFIX)"; exit 1; }
  mkdir -p "$ROOTFS$(dirname "$SANDBOXKIT_GO_PREFIX")"
  cp -a "$SANDBOXKIT_GO_PREFIX" "$ROOTFS$SANDBOXKIT_GO_PREFIX"
fi
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/*
tar -C "$ROOTFS" -c . | docker import \
  --change "LABEL sandboxkit.packages=$WANT" \
  --change "ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "WORKDIR /work" \
  - "$IMAGE" >/dev/null
log "built $IMAGE in $(($(date +%s) - started))s"
