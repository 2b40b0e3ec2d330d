#!/usr/bin/env bash
# Run the README's two set-up commands on a machine that has never seen the project: a fresh Debian
# bookworm (debootstrap minbase: no compiler, no Python, no node) holding only a copy of this checkout,
# with network to the apt mirror and the package registries this machine uses. Proves the set-up
# installs what the suite needs by itself, where a developer's machine hides what was installed by hand.
#
#   sudo bash scripts/fresh-machine.sh                       # both commands, the whole suite (~40 min on 2 cores)
#   sudo bash scripts/fresh-machine.sh tests/unit tests/judge  # the test command on those paths only
#
# What differs from a real machine, and why:
#   * a root of its own (pivot_root in a mount namespace), not a VM: it shares this kernel, so there is no Docker engine of its own (a second dockerd
#     would fight the host's over docker0 and bind-mount paths): SANDBOXKIT_DOCKER=0 leaves the engine out
#     and the test command deselects the `docker` mark. Everything else (bubblewrap, cgroups, every
#     toolchain, torch/TRL/verl/Ray) is installed and tested inside.
#   * it reaches the registries as this machine does: its CA bundle, resolv.conf and pip configuration
#     (local wheel mirrors, read-only) are copied in.
# Not part of .ci/run: a full run takes longer than CI's budget. Exit code: the first command that failed.
#
# Environment: FRESH_ROOT (default /var/tmp/sandboxkit-fresh; removed first), FRESH_KEEP=1 keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
ROOT=${FRESH_ROOT:-/var/tmp/sandboxkit-fresh}
log() { echo "[fresh-machine $(date -u +%H:%M:%S)] $*" >&2; }
[ "$(id -u)" = 0 ] || { log "needs root (debootstrap, chroot, and the README's commands use apt)"; exit 2; }
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
. scripts/toolchains.sh

# The README's commands, read from it (the first two bash blocks), so this runs exactly what users are told.
readme_block() { awk -v want="$1" '/^```bash$/ {n++; on = (n == want); next} /^```$/ {on = 0} on' README.md; }
MAIN_JOB=$(readme_block 1)
TEST_CMD=$(readme_block 2)
[ -n "$MAIN_JOB" ] && [ -n "$TEST_CMD" ] || { log "README.md has no two bash blocks"; exit 2; }
TEST_CMD="$TEST_CMD -m 'not docker'${*:+ $*}"

unmount_all() {  # every mount at or below $ROOT, deepest first (debootstrap leaves its own /proc there)
  awk -v root="$ROOT" '$2 == root || index($2, root "/") == 1 {print $2}' /proc/mounts | sort -r |
    while read -r target; do umount -l "$target" 2>/dev/null || true; done
}
cleanup() {
  unmount_all
  [ "${FRESH_KEEP:-0}" = 1 ] || rm -rf --one-file-system "$ROOT"
}
trap cleanup EXIT
mount_in() {  # mount_in SOURCE TARGET [mount options...]
  mkdir -p "$ROOT$2"
  mount "${@:3}" "$1" "$ROOT$2"
}

unmount_all
rm -rf --one-file-system "$ROOT"
started=$SECONDS
log "debootstrap bookworm (minbase) into $ROOT"
debootstrap --variant=minbase bookworm "$ROOT" "$(debian_mirror)" >/tmp/sandboxkit-fresh-debootstrap.log 2>&1 || {
  tail -n 30 /tmp/sandboxkit-fresh-debootstrap.log >&2
  exit 1
}
log "debootstrap took $((SECONDS - started))s"
# The root must be a mount point for pivot_root (run_in below).
mount --bind "$ROOT" "$ROOT"

# The checkout as git sees it (tracked and new files, nothing ignored: no .venv, no caches).
mkdir -p "$ROOT/src"
git ls-files -z --cached --others --exclude-standard | tar -C "$SRC" --null -T - -c | tar -C "$ROOT/src" -x
# This machine's way to the registries.
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The CA bundle lives outside /etc/ssl: installing ca-certificates (a JDK dependency) rewrites that one.
CA=/root/registry-ca.crt
mkdir -p "$ROOT/root"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT$CA"
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
[ -d /etc/xdg/pip ] && mkdir -p "$ROOT/etc/xdg" && cp -r /etc/xdg/pip "$ROOT/etc/xdg/pip"
for dir in /opt/wheels /opt/pypi /opt/pypi-more; do
  [ -d "$dir" ] && mount_in "$dir" "$dir" --bind -o ro
done
mount_in proc /proc -t proc
mount_in /sys /sys --rbind
mount_in /dev /dev --rbind
mount_in tmpfs /tmp -t tmpfs

ENV=(HOME=/root LANG=C.UTF-8 TERM=dumb CI=true SANDBOXKIT_DOCKER=0
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  PIP_CERT=$CA SSL_CERT_FILE=$CA REQUESTS_CA_BUNDLE=$CA NODE_EXTRA_CA_CERTS=$CA CURL_CA_BUNDLE=$CA)
run_in() {  # run_in TITLE COMMAND: the command in the fresh root, timed
  local rc=0 t0=$SECONDS
  log "$1: $2"
  # Not chroot: the kernel refuses new user namespaces to a chrooted process, so bubblewrap (and with it
  # every namespace the subprocess backend sets up) would be unavailable. A mount namespace of its own whose
  # root is the fresh tree (pivot_root) is what a machine looks like from inside.
  unshare --mount --propagation private -- /bin/bash -c \
    'cd "$1" && mkdir -p .host && pivot_root . .host && cd / && { umount -l /.host 2>/dev/null || true; } &&
     exec /usr/sbin/chroot . "${@:2}"' _ "$ROOT" /usr/bin/env -i "${ENV[@]}" /bin/bash -c "cd /src && $2" || rc=$?
  log "$1: rc=$rc in $((SECONDS - t0))s"
  return "$rc"
}
run_in "main job" "$MAIN_JOB"
run_in "test command" "$TEST_CMD"
log "all done in $((SECONDS - started))s"
