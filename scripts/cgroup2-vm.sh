#!/usr/bin/env bash
# Run the subprocess backend's cgroup checks on a REAL cgroup v2 kernel, in a QEMU VM.
#
# Why: CI hosts here are cgroup v1 (hybrid), so the v2 code path (the delegated subtree, cpu.max,
# memory.events, pids.max on the unified hierarchy) never runs there. This boots Debian's kernel
# under TCG (KVM hangs on this machine kind) with this machine's whole filesystem shared read-only
# over virtio-9p, so the guest runs the very python, venv and source tree the host has; nothing is
# copied or installed into an image. The guest (scripts/cgroup2-vm-guest.sh) mounts cgroup2 alone
# with nsdelegate, puts itself in /process_api/x, whose parent gives it only memory (as on the real
# 16-core host; PARENT below), then runs `sandboxkit doctor` and the cgroup tests under CI=true.
#
# Needs: root, `apt-get install -y qemu-system-x86 linux-image-amd64` (puts the kernel in /boot),
# a static busybox (/usr/bin/busybox), and the project venv (.venv). Options (environment):
#   SRC=<tree>        the source tree to test (default: this script's repository)
#   VENV=<dir>        the virtual environment whose python runs it (default: $SRC/.venv)
#   PKG=<dir>         where the sandboxkit package is imported from (default: $SRC/src; point it at
#                     another checkout's src to run these tests against that code, e.g. before a fix)
#   TESTS="<args>"    pytest arguments (default: the cgroup and cpu tests, the hostile bombs, and every
#                     subprocess, conformance and judge test about memory)
#   PARENT=<list>     the controllers /process_api gives /process_api/x (default "memory", as on the
#                     real host of docs/cgroups.md; "memory,pids,cpu" for the fully delegated layout)
#   VM_TIMEOUT=<s>    wall-clock limit of the VM (default 900)
#   SMP=<n> MEM=<MiB> the guest's CPUs (default 2) and memory (default 2048)
#   MODE=systemd      boot systemd as the guest's PID 1 instead (systemd owns the hierarchy): the
#                     check runs in a service systemd did not delegate, where sandboxkit must ask
#                     for a delegated transient scope (scripts/cgroup2-vm-systemd.sh)
# Prints the guest's console, then a SUMMARY block; exits 0 only when every guest step passed.
# Wall time on a 2-core host under load: see docs/cgroups.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${SRC:-$here}
VENV=${VENV:-$SRC/.venv}
PKG=${PKG:-$SRC/src}
VM_TIMEOUT=${VM_TIMEOUT:-900}
MODE=${MODE:-plain}
SMP=${SMP:-2}
MEM=${MEM:-2048}
TESTS=${TESTS:-"tests/backends/subprocess/test_subprocess_cgroup.py tests/backends/subprocess/test_subprocess_cpu.py tests/backends/subprocess/test_subprocess_hostile.py tests/backends/subprocess/test_subprocess_races.py tests/backends/subprocess/test_subprocess_attacks.py tests/backends/subprocess/test_subprocess_kernel.py tests/conformance/test_subprocess.py tests/judge/test_grade.py -k 'cgroup or cpu or memory or fork_bomb or frozen_while_the_host'"}
PARENT=${PARENT:-memory}

die() { echo "cgroup2-vm: $*" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || die "no qemu-system-x86_64: apt-get install -y qemu-system-x86"
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1) || true
[ -n "$kernel" ] || die "no kernel in /boot: apt-get install -y linux-image-amd64"
version=${kernel#/boot/vmlinuz-}
modules=/lib/modules/$version
[ -f "$modules/modules.dep" ] || die "no $modules/modules.dep for $kernel"
busybox=$(command -v busybox) || die "no busybox: apt-get install -y busybox-static"
file -L "$busybox" | grep -q "statically linked" || die "$busybox is not statically linked: apt-get install -y busybox-static"
[ -x "$VENV/bin/python" ] || die "no python in $VENV (run scripts/bootstrap.sh)"

work=$(mktemp -d /tmp/cgroup2-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
initrd=$work/initrd
mkdir -p "$initrd"/{bin,dev,proc,sys,host,modules}
cp "$busybox" "$initrd/bin/busybox"

# The 9p modules and what they need, in load order (modules.dep lists a module's needs after it).
declare -A seen=()
order=()
add_module() {
    local rel=$1 deps dep
    [ -n "${seen[$rel]:-}" ] && return
    seen[$rel]=1
    deps=$(grep "^$rel:" "$modules/modules.dep" | cut -d: -f2)
    for dep in $deps; do add_module "$dep"; done
    order+=("$rel")
}
for m in kernel/drivers/virtio/virtio_pci.ko kernel/net/9p/9pnet_virtio.ko kernel/fs/9p/9p.ko; do
    grep -q "^$m:" "$modules/modules.dep" && add_module "$m"
done
: > "$initrd/modules/order"
for rel in "${order[@]}"; do
    cp "$modules/$rel" "$initrd/modules/"
    basename "$rel" >> "$initrd/modules/order"
done

# The guest's first process: load 9p, mount this machine's / read-only, and run the guest script in it
# (which mounts /proc, /sys and /dev of its own).
cat > "$initrd/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod /modules/$m 2>/dev/null; done
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 host /host; then
    echo "SUMMARY: FAIL cannot mount the host's filesystem over 9p"
    echo o > /proc/sysrq-trigger
fi
guest=$(sed -n 's/.*guest=\([^ ]*\).*/\1/p' /proc/cmdline)
# systemd believes it runs in a container (the host's / has /.dockerenv), and a containerised
# systemd reads its settings from its own arguments rather than the kernel's command line.
sdargs=$(tr ' ' '\n' < /proc/cmdline | grep '^systemd\.' | tr '\n' ' ')
umount /proc /sys /dev
# switch_root, not chroot: the kernel refuses user namespaces (bubblewrap) to a chrooted process.
case "$guest" in
    *systemd.sh) exec switch_root /host /lib/systemd/systemd $sdargs ;;  # it runs the script (systemd.run=)
    *) exec switch_root /host /bin/bash "$guest" ;;
esac
INIT
chmod +x "$initrd/init"
(cd "$initrd" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

# Arguments for the guest script travel on the kernel command line (no spaces: base64).
args=$(printf '%s' "$TESTS" | base64 -w0)
# no_timer_check: on a loaded host the emulated timer can miss the kernel's IO-APIC check, which then panics.
cmdline="console=ttyS0 rdinit=/init quiet panic=-1 cgroup_no_v1=all no_timer_check"
if [ "$MODE" = systemd ]; then
    guest=$SRC/scripts/cgroup2-vm-systemd.sh
    cmdline+=" guest=$guest systemd.unified_cgroup_hierarchy=1 systemd.unit=kernel-command-line.service"
    cmdline+=" systemd.run=$guest systemd.run_success_action=poweroff systemd.run_failure_action=poweroff"
    cmdline+=" systemd.log_level=warning systemd.show_status=0"
else
    cmdline+=" guest=$SRC/scripts/cgroup2-vm-guest.sh"
fi
cmdline+=" sk_src=$SRC sk_pkg=$PKG sk_venv=$VENV sk_tests=$args sk_parent=$PARENT"
log=$work/console.log
started=$(date +%s)
set +e
timeout "$VM_TIMEOUT" qemu-system-x86_64 -accel tcg -m "$MEM" -smp "$SMP" -nographic -no-reboot \
    -kernel "$kernel" -initrd "$work/initrd.gz" -append "$cmdline" \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
    -nic none </dev/null 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - started ))
echo
echo "==================== SUMMARY (VM wall time ${elapsed}s, qemu exit $rc) ===================="
grep -a "^SUMMARY:" "$log" | sed 's/^SUMMARY: //' | tr -d '\r'
[ "$rc" = 124 ] && { echo "FAIL the VM ran past VM_TIMEOUT=${VM_TIMEOUT}s"; exit 1; }
grep -aq "^SUMMARY: ALL PASSED" "$log" || exit 1
