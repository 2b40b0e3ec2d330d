"""A seccomp filter for sandboxed processes, built as a classic BPF program in pure Python.

Why: namespaces and a private uid keep a program away from the host's files and processes,
but every system call still reaches the kernel. Most of the kernel's attack surface that a
judge or agent program never needs -- io_uring, eBPF, the keyring, perf events, userfaultfd,
module loading, mounting, namespace changes -- is also where local privilege escalations are
found, and the keyring is state that would outlive a run. The filter refuses those calls with
``EPERM``, in the spirit of Docker's default profile (which refuses the same families).

With ``network=False`` it also refuses ``socket(AF_UNIX, ...)``: the read-only host
filesystem may hold world-connectable Unix sockets of host services, and connecting to one
needs no write access to the mount. ``socketpair`` (asyncio's self-pipe, multiprocessing
pipes) is unaffected.

bubblewrap loads the program with ``--seccomp FD`` after its own set-up, just before running
the sandbox's first process; every descendant inherits it and cannot remove it. No libseccomp:
the program is a few dozen ``struct sock_filter`` entries, assembled here.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

__all__ = ["DENIED", "filter_program", "seccomp_fd", "supported"]

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16
# Classic BPF opcodes.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_AF_UNIX = 1
_X32_BIT = 0x40000000

#: Refused system calls (the same families Docker's default profile refuses to unprivileged containers).
DENIED = (
    "add_key", "keyctl", "request_key",  # the kernel keyring: state that outlives a run
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # a large, often-exploited surface
    "bpf", "perf_event_open", "userfaultfd",  # kernel exploitation primitives
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "unshare", "setns",  # namespaces and mounts: bubblewrap's job, not the program's
    "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "vhangup", "lookup_dcookie",
    "open_by_handle_at", "fanotify_init", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "nfsservctl", "uselib", "sysfs", "_sysctl", "iopl", "ioperm", "create_module", "get_kernel_syms",
    "query_module",
)  # fmt: skip

#: (AUDIT_ARCH value, syscall numbers) per machine; a name missing on an architecture does not exist there.
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "add_key": 248, "keyctl": 250, "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
            "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "mount": 165, "umount2": 166, "pivot_root": 155, "move_mount": 429,
            "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "mount_setattr": 442, "unshare": 272, "setns": 308, "swapon": 167, "swapoff": 168, "reboot": 169,
            "acct": 163, "quotactl": 179, "syslog": 103, "vhangup": 153, "lookup_dcookie": 212,
            "open_by_handle_at": 304, "fanotify_init": 300, "settimeofday": 164, "clock_settime": 227,
            "clock_adjtime": 305, "adjtimex": 159, "nfsservctl": 180, "uselib": 134, "sysfs": 139,
            "_sysctl": 156, "iopl": 172, "ioperm": 173, "create_module": 174, "get_kernel_syms": 177,
            "query_module": 178, "socket": 41,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "add_key": 217, "keyctl": 219, "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
            "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
            "delete_module": 106, "mount": 40, "umount2": 39, "pivot_root": 41, "move_mount": 429,
            "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "mount_setattr": 442, "unshare": 97, "setns": 268, "swapon": 224, "swapoff": 225, "reboot": 142,
            "acct": 89, "quotactl": 60, "syslog": 116, "vhangup": 58, "lookup_dcookie": 18,
            "open_by_handle_at": 265, "fanotify_init": 262, "settimeofday": 170, "clock_settime": 112,
            "clock_adjtime": 266, "adjtimex": 171, "nfsservctl": 42, "socket": 198,
        },
    ),
}  # fmt: skip


def supported(machine: str | None = None) -> bool:
    """Whether a filter can be built for this machine's architecture."""
    return (machine or platform.machine()) in _ARCHES


def filter_program(*, deny_unix_sockets: bool, machine: str | None = None) -> bytes:
    """The BPF program (packed ``struct sock_filter`` array) for this architecture.

    Raises:
        ValueError: no syscall table for ``machine``.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise ValueError(f"no seccomp syscall table for architecture {machine!r}")
    arch, numbers = _ARCHES[machine]
    # Instructions as (code, jt, jf, k) where jt/jf may be a label name, resolved below.
    prog: list[tuple[int, int | str, int | str, int]] = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 0, "bad_arch", arch),  # another ABI (i386 int 0x80) would use other numbers
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if machine == "x86_64":
        prog.append((_JGE_K, "deny", 0, _X32_BIT))  # the x32 ABI: same numbers plus a bit
    for name in DENIED:
        if name in numbers:
            prog.append((_JEQ_K, "deny", 0, numbers[name]))
    if deny_unix_sockets:
        prog += [
            (_JEQ_K, 0, "allow", numbers["socket"]),
            (_LD_W_ABS, 0, 0, _OFF_ARG0),  # the domain (low 32 bits of args[0])
            (_JEQ_K, "deny", "allow", _AF_UNIX),
        ]
    labels = {"allow": len(prog), "deny": len(prog) + 1, "bad_arch": len(prog) + 2}
    prog += [
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
    ]
    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(prog):
        out += struct.pack("=HBBI", code, _offset(jt, index, labels), _offset(jf, index, labels), k)
    return bytes(out)


def _offset(target: int | str, index: int, labels: dict[str, int]) -> int:
    if isinstance(target, int):
        return target
    offset = labels[target] - index - 1
    assert 0 <= offset < 256, "seccomp program too long for a single jump"
    return offset


def seccomp_fd(program: bytes) -> int:
    """A descriptor holding ``program`` at offset 0, for bubblewrap's ``--seccomp FD``."""
    fd = os.memfd_create("sandboxkit-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
