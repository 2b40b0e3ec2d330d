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
#   * a root of its own (pivot_root in a mount namespace), not a VM: it shares this kernel (a VM under
#     software emulation is too slow for the whole suite).
#   * a network namespace of its own, joined to this machine by a veth pair and NAT (the only change to the
#     host's network: one veth, one MASQUERADE and two FORWARD rules, all removed on exit). So the README's
#     test command starts its OWN Docker engine (scripts/docker-setup.sh, as on any machine): its docker0,
#     iptables and containerd's abstract sockets live in that namespace, /var/lib/docker and /run in the
#     fresh tree, and nothing is deselected. The host's engine and its bridge are never touched.
#   * it reaches the registries as this machine does: its CA bundle, resolv.conf and pip configuration
#     (local wheel mirrors, read-only) are copied in.
#   * the project's machine image ships CPython 3.12 and 3.13 through pyenv (no registry serves an
#     interpreter, and bookworm's apt has 3.11 only): those builds are bind-mounted, read-only, where pyenv
#     keeps them (/root/.pyenv/versions). Nothing else of pyenv, and not the 3.11 the developers use: the
#     README's commands make .venv from Debian's python3, as on any fresh machine.
# Not part of .ci/run: a full run takes longer than CI's budget. Exit code: the first command that failed.
#
# Environment: FRESH_ROOT (default /var/tmp/sandboxkit-fresh; removed first), FRESH_KEEP=1 keeps it,
# FRESH_SLOT=1..9 for a second fresh machine beside the first (its own root, namespace, veth and subnet).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
SLOT=${FRESH_SLOT:-0}
[[ "$SLOT" =~ ^[0-9]$ ]] || { echo "FRESH_SLOT must be one digit, got '$SLOT'" >&2; exit 2; }
SUFFIX=${SLOT#0}  # slot 0 keeps the original names
ROOT=${FRESH_ROOT:-/var/tmp/sandboxkit-fresh${SUFFIX:+-$SUFFIX}}
log() { echo "[fresh-machine $(date -u +%H:%M:%S)] $*" >&2; }
[ "$(id -u)" = 0 ] || { log "needs root (debootstrap, chroot, and the README's commands use apt)"; exit 2; }
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
. scripts/toolchains.sh

# The README's commands, read from it (the first two bash blocks), so this runs exactly what users are told.
readme_block() { awk -v want="$1" '/^```bash$/ {n++; on = (n == want); next} /^```$/ {on = 0} on' README.md; }
MAIN_JOB=$(readme_block 1)
TEST_CMD=$(readme_block 2)
[ -n "$MAIN_JOB" ] && [ -n "$TEST_CMD" ] || { log "README.md has no two bash blocks"; exit 2; }
TEST_CMD="$TEST_CMD${*:+ $*}"

unmount_all() {  # every mount at or below $ROOT, deepest first (debootstrap leaves its own /proc there)
  awk -v root="$ROOT" '$2 == root || index($2, root "/") == 1 {print $2}' /proc/mounts | sort -r |
    while read -r target; do umount -l "$target" 2>/dev/null || true; done
}
# The fresh machine's network: a namespace whose eth0 is one end of a veth pair, NATed out through this
# machine's default route. Names and subnet are fixed per FRESH_SLOT, so two slots can run side by side.
NETNS=sandboxkit-fresh${SUFFIX:+-$SUFFIX} HOST_IF=skfresh${SLOT}h PEER_IF=skfresh${SLOT}p NET=10.213.$((77 + SLOT))
nat_rules() {  # nat_rules -A|-D: the host's three rules for the namespace's traffic
  iptables -t nat "$1" POSTROUTING -s "$NET.0/30" ! -o "$HOST_IF" -m comment --comment "$NETNS" -j MASQUERADE
  iptables "$1" FORWARD -i "$HOST_IF" -m comment --comment "$NETNS" -j ACCEPT
  iptables "$1" FORWARD -o "$HOST_IF" -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "$NETNS" -j ACCEPT
}
net_up() {
  local mtu
  mtu=$(cat "/sys/class/net/$(ip route show default | awk '{print $5; exit}')/mtu")
  ip netns add "$NETNS"
  ip link add "$HOST_IF" mtu "$mtu" type veth peer name "$PEER_IF" mtu "$mtu"
  ip link set "$PEER_IF" netns "$NETNS"
  ip -n "$NETNS" link set "$PEER_IF" name eth0
  ip -n "$NETNS" addr add "$NET.2/30" dev eth0
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" link set eth0 up
  ip -n "$NETNS" route add default via "$NET.1"
  ip addr add "$NET.1/30" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  sysctl -q -w net.ipv4.ip_forward=1  # already 1 wherever an engine runs
  # Inserted first, so the host engine's FORWARD policy (DROP) and its chains never see this traffic.
  iptables -I FORWARD 1 -i "$HOST_IF" -m comment --comment "$NETNS" -j ACCEPT
  iptables -I FORWARD 1 -o "$HOST_IF" -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "$NETNS" -j ACCEPT
  iptables -t nat -A POSTROUTING -s "$NET.0/30" ! -o "$HOST_IF" -m comment --comment "$NETNS" -j MASQUERADE
}
net_down() {  # stop what the fresh machine left running (its engine first: it stops its containers), then the network
  local pid pids
  pid=$(cat "$ROOT/run/docker.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  if [ -e "/run/netns/$NETNS" ]; then
    pids=$(ip netns pids "$NETNS" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$NETNS" 2>/dev/null || true
  fi
  ip link del "$HOST_IF" 2>/dev/null || true
  while nat_rules -D 2>/dev/null; do :; done
}
cleanup() {
  net_down
  unmount_all
  [ "${FRESH_KEEP:-0}" = 1 ] || rm -rf --one-file-system "$ROOT"
}
trap cleanup EXIT
mount_in() {  # mount_in SOURCE TARGET [mount options...]
  mkdir -p "$ROOT$2"
  mount "${@:3}" "$1" "$ROOT$2"
}

net_down
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
# The image's other Pythons (see the header): Harbor's provider needs 3.12 (scripts/harbor-venv.sh).
PYENV_VERSIONS="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")/versions"
for dir in "$PYENV_VERSIONS"/3.12.* "$PYENV_VERSIONS"/3.13.*; do
  [ -d "$dir" ] && mount_in "$dir" "/root/.pyenv/versions/$(basename "$dir")" --bind -o ro
done
mount_in proc /proc -t proc
mount_in /dev /dev --rbind
mount_in tmpfs /tmp -t tmpfs

ENV=(HOME=/root LANG=C.UTF-8 TERM=dumb CI=true
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  PIP_CERT=$CA SSL_CERT_FILE=$CA REQUESTS_CA_BUNDLE=$CA NODE_EXTRA_CA_CERTS=$CA CURL_CA_BUNDLE=$CA)
run_in() {  # run_in TITLE COMMAND: the command in the fresh root, timed
  local rc=0 t0=$SECONDS
  log "$1: $2"
  # Not chroot: the kernel refuses new user namespaces to a chrooted process, so bubblewrap (and with it
  # every namespace the subprocess backend sets up) would be unavailable. A mount namespace of its own whose
  # root is the fresh tree (pivot_root), in the fresh network namespace, is what a machine looks like from
  # inside. /sys is mounted from within that namespace, so /sys/class/net lists its own interfaces (the
  # engine's docker0, not the host's); the cgroup hierarchies are the kernel's, shared as on any machine.
  nsenter --net="/run/netns/$NETNS" unshare --mount --propagation private -- /bin/bash -c \
    'mount -t sysfs sysfs "$1/sys" && mount --rbind /sys/fs/cgroup "$1/sys/fs/cgroup" &&
     cd "$1" && mkdir -p .host && pivot_root . .host && cd / && { umount -l /.host 2>/dev/null || true; } &&
     exec /usr/sbin/chroot . "${@:2}"' _ "$ROOT" /usr/bin/env -i "${ENV[@]}" /bin/bash -c "cd /src && $2" || rc=$?
  log "$1: rc=$rc in $((SECONDS - t0))s"
  return "$rc"
}
net_up
run_in "main job" "$MAIN_JOB"
run_in "test command" "$TEST_CMD"
log "all done in $((SECONDS - started))s"
