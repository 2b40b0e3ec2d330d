#!/bin/bash
# Inside scripts/cgroup2-vm.sh's guest with MODE=systemd: run by systemd (systemd.run=) as
# kernel-command-line.service, a cgroup systemd owns and has not delegated. sandboxkit must leave
# that cgroup alone and ask systemd for a transient scope with Delegate=yes, then build its subtree;
# where it cannot ask (no D-Bus), it runs sandboxes without cgroup limits and says why.
exec > /dev/console 2>&1
set -u
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
SRC=$(arg sk_src)
PKG=$(arg sk_pkg)
VENV=$(arg sk_venv)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
export PYTHONPATH=$PKG PYTHONDONTWRITEBYTECODE=1
for d in /tmp /var/tmp /root/.cache; do mountpoint -q "$d" || mount -t tmpfs -o mode=1777 tmpfs "$d" 2>/dev/null; done
echo "SUMMARY: systemd $(systemctl --version | head -1 | cut -d' ' -f2) is PID 1 ($(cat /proc/1/comm)); this service's cgroup: $(cat /proc/self/cgroup)"
start=$(date +%s)
# First without a D-Bus daemon (only this unit was started): systemd cannot be asked, so the
# sandboxes run without cgroup limits, and say why. Then with the system bus, as on real hosts.
"$VENV/bin/python" "$SRC/scripts/cgroup2-vm-probe.py" systemd-without-dbus > /tmp/nodbus.txt 2>&1
cat /tmp/nodbus.txt
grep -q "SUMMARY: systemd-without-dbus: missing memory limit: systemd manages .* has not delegated it" /tmp/nodbus.txt \
    && grep -q "SUMMARY: systemd-without-dbus: a sandbox ran: ok" /tmp/nodbus.txt || nodbus=fail
systemctl start dbus.socket dbus.service
echo "SUMMARY: systemd: D-Bus daemon running: $(systemctl is-active dbus.service)"
"$VENV/bin/python" "$SRC/scripts/cgroup2-vm-probe.py" systemd > /tmp/systemd.txt 2>&1
rc=$?
cat /tmp/systemd.txt
echo "SUMMARY: systemd: units now: $(systemctl list-units --type=scope --no-legend 'sandboxkit-*' | awk '{print $1}')"
echo "SUMMARY: systemd scenario took $(( $(date +%s) - start ))s"
if [ "${nodbus:-}" != fail ] && [ "$rc" = 0 ] && grep -q "SUMMARY: systemd: cgroup limits \['cpu', 'memory', 'pids'\].*systemd scope" /tmp/systemd.txt; then
    echo "SUMMARY: ALL PASSED"
else
    echo "SUMMARY: SOME FAILED (probe exit $rc)"
fi
