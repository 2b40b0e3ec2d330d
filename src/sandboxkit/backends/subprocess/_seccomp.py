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

#: The architectures a filter is built for: (name as ``platform.machine()`` says it, AUDIT_ARCH value).
_AUDIT_ARCH = (("x86_64", 0xC000003E), ("aarch64", 0xC00000B7))
#: (syscall, number on x86_64, number on aarch64): one row per call, so a call added is added for every
#: architecture at once; None where the call does not exist on that architecture.
_NUMBERS: tuple[tuple[str, int | None, int | None], ...] = (
    ("add_key", 248, 217), ("keyctl", 250, 219), ("request_key", 249, 218), ("io_uring_setup", 425, 425),
    ("io_uring_enter", 426, 426), ("io_uring_register", 427, 427), ("bpf", 321, 280), ("perf_event_open", 298, 241),
    ("userfaultfd", 323, 282), ("kexec_load", 246, 104), ("kexec_file_load", 320, 294), ("init_module", 175, 105),
    ("finit_module", 313, 273), ("delete_module", 176, 106), ("mount", 165, 40), ("umount2", 166, 39),
    ("pivot_root", 155, 41), ("move_mount", 429, 429), ("open_tree", 428, 428), ("fsopen", 430, 430),
    ("fsconfig", 431, 431), ("fsmount", 432, 432), ("fspick", 433, 433), ("mount_setattr", 442, 442),
    ("unshare", 272, 97), ("setns", 308, 268), ("swapon", 167, 224), ("swapoff", 168, 225), ("reboot", 169, 142),
    ("acct", 163, 89), ("quotactl", 179, 60), ("syslog", 103, 116), ("vhangup", 153, 58), ("lookup_dcookie", 212, 18),
    ("open_by_handle_at", 304, 265), ("fanotify_init", 300, 262), ("settimeofday", 164, 170),
    ("clock_settime", 227, 112), ("clock_adjtime", 305, 266), ("adjtimex", 159, 171), ("nfsservctl", 180, 42),
    ("uselib", 134, None), ("sysfs", 139, None), ("_sysctl", 156, None), ("iopl", 172, None), ("ioperm", 173, None),
    ("create_module", 174, None), ("get_kernel_syms", 177, None), ("query_module", 178, None), ("socket", 41, 198),
)  # fmt: skip
#: (AUDIT_ARCH value, syscall numbers) per machine; a name missing on an architecture does not exist there.
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    machine: (audit, {name: number for name, *numbers in _NUMBERS if (number := numbers[i]) is not None})
    for i, (machine, audit) in enumerate(_AUDIT_ARCH)
}


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
