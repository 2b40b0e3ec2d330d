#!/bin/bash
# Inside the cgroup v2 VM of scripts/cgroup2-vm.sh: PID 1, its root the host's / (read-only, over 9p).
# Lays out cgroup2 as issue 32.2's host had it, then runs `sandboxkit doctor` and the tests.
# Every result line starts with "SUMMARY: " for the host script to collect.
set -u
# As PID 1 this script must power the VM off itself, whatever happens.
trap 'sync; echo o > /proc/sysrq-trigger; sleep 30' EXIT
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
SRC=$(arg sk_src)
PKG=$(arg sk_pkg)
VENV=$(arg sk_venv)
TESTS=$(arg sk_tests | base64 -d)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
export PYTHONPATH=$PKG PYTHONDONTWRITEBYTECODE=1 CI=true COLUMNS=200

# The loopback interface, down in a fresh kernel: a test that lets a program use the network connects
# to a port on 127.0.0.1 (test_connecting_to_a_host_port).
ip link set lo up 2>/dev/null || busybox ip link set lo up 2>/dev/null || echo "SUMMARY: no loopback (no ip command)"
# The host's / is read-only here: give the writable places a tmpfs.
for d in /tmp /run /var/tmp /dev/shm /root/.cache; do mount -t tmpfs -o mode=1777 tmpfs "$d" 2>/dev/null; done
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || { echo "SUMMARY: FAIL cannot mount cgroup2"; exit 1; }
# The real host's layout (docs/cgroups.md): every controller enabled in the root's subtree_control,
# but /process_api gives its children only those of sk_parent (default "memory"), and this shell (so
# every test process) lives in /process_api/x. sk_parent=memory,pids,cpu is the fully delegated layout.
PARENT_CTL=$(arg sk_parent); PARENT_CTL=${PARENT_CTL:-memory}
echo "+memory +pids +cpu" > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/process_api/x
echo "$PARENT_CTL" | tr ',' '\n' | sed 's/^/+/' | tr '\n' ' ' > /sys/fs/cgroup/process_api/cgroup.subtree_control
echo $$ > /sys/fs/cgroup/process_api/x/cgroup.procs
echo "SUMMARY: sandboxkit from $PKG, tests from $SRC"
echo "SUMMARY: kernel $(uname -r), $(nproc) CPU(s), cgroup2 $(grep -o 'cgroup2 [^ ]* [^ ]*' /proc/mounts)"
echo "SUMMARY: this process: $(cat /proc/self/cgroup); controllers delegated: $(cat /sys/fs/cgroup/process_api/x/cgroup.controllers)"

cd "$SRC" || exit 1
ok=1
start=$(date +%s)
"$VENV/bin/python" -m sandboxkit.cli doctor --no-docker > /tmp/doctor.txt 2>&1
cat /tmp/doctor.txt
grep -E "cgroup" /tmp/doctor.txt | sed 's/^ */SUMMARY: doctor: /'
grep -q "in force: cgroup limits: memory, pids, cpu" /tmp/doctor.txt || { ok=0; echo "SUMMARY: FAIL doctor does not report memory, pids and cpu in force"; }
echo "SUMMARY: doctor took $(( $(date +%s) - start ))s; cgroup tree now:"
(cd /sys/fs/cgroup && find process_api sandboxkit -maxdepth 3 -type d 2>/dev/null | sed 's/^/SUMMARY:   /')

start=$(date +%s)
eval "set -- $TESTS"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -rA -s "$@" > /tmp/pytest.txt 2>&1
rc=$?
cat /tmp/pytest.txt
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|cores|busy processes|memory_exceeded|pids.max|passed|failed" /tmp/pytest.txt | sed 's/^/SUMMARY: /'
echo "SUMMARY: pytest exit $rc in $(( $(date +%s) - start ))s"
echo "SUMMARY: cgroups left after the tests: $(cd /sys/fs/cgroup && find . -name 'sandboxkit-*' -type d | tr '\n' ' ')"
[ "$rc" = 0 ] || ok=0

# A container: a process in a cgroup of its own, in a new cgroup namespace, with cgroup2 mounted
# there (so its cgroup is "/" and the namespace root is where it must build its subtree).
start=$(date +%s)
# Its parent gives it every controller (a container runtime's slice does).
mkdir -p /sys/fs/cgroup/containers/container
echo "+memory +pids +cpu" > /sys/fs/cgroup/containers/cgroup.subtree_control
sh -c 'echo $$ > /sys/fs/cgroup/containers/container/cgroup.procs; exec unshare --cgroup --mount --propagation private sh -c "umount /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec \"\$0\" \"\$1\" container" "$0" "$1"' \
    "$VENV/bin/python" "$SRC/scripts/cgroup2-vm-probe.py" > /tmp/container.txt 2>&1
crc=$?
cat /tmp/container.txt
grep -q "SUMMARY: container: cgroup limits \['cpu', 'memory', 'pids'\].*container's cgroup namespace root" /tmp/container.txt \
    || { ok=0; echo "SUMMARY: FAIL in a container's cgroup namespace the subtree was not built (exit $crc)"; }
echo "SUMMARY: container scenario took $(( $(date +%s) - start ))s"
[ "$ok" = 1 ] && echo "SUMMARY: ALL PASSED" || echo "SUMMARY: SOME FAILED"
