"""The sandbox's seccomp filter: system calls a model-written program never needs, refused by the kernel.

The filter is a classic BPF program (`struct sock_filter[]`) built here, in the parent, and
installed by the child (tools/sandbox/bootstrap.py) with `prctl(PR_SET_SECCOMP)` after its own
set-up and before the program's first line. Once installed it cannot be removed, whatever the
program does to the interpreter's memory. It refuses, with EPERM:

  - new processes and programs: execve/execveat, fork/vfork, and clone without CLONE_THREAD
    (threads pass the filter; the default process limit of one refuses them too); clone3 answers ENOSYS, so libc falls back to clone, whose flags
    the filter can read;
  - reaching other processes: ptrace, process_vm_readv/writev, kcmp, the pidfd calls,
    setpriority and the sched_set* calls (the PID namespace already hides every other process);
  - leaving or changing the namespaces: unshare, setns, clone with a CLONE_NEW* flag, mount and
    the new mount API, pivot_root, chroot;
  - kernel attack surface no program here uses: bpf, perf_event_open, userfaultfd, io_uring,
    the keyring, modules, kexec, reboot, swap, clock and host names, handles by inode;
  - any other architecture's system calls (x32 and i386 on x86-64).

Known architectures: x86-64 and aarch64. Elsewhere `build_filter` returns None and the sandbox
reports that no filter holds.
"""

from __future__ import annotations

import platform
import struct

__all__ = ["build_filter", "REFUSED_CALLS"]

# The system calls refused on every architecture (those an architecture lacks are skipped).
REFUSED_CALLS = (
    "execve", "execveat", "fork", "vfork",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm", "open_by_handle_at",
    "name_to_handle_at", "quotactl", "lookup_dcookie", "vhangup", "personality", "settimeofday",
    "clock_settime", "adjtimex", "clock_adjtime", "sethostname", "setdomainname", "uselib", "ustat", "sysfs",
    "_sysctl", "nfsservctl", "migrate_pages", "move_pages", "mbind", "set_mempolicy", "process_madvise",
)

# System call numbers, from the kernel's headers (asm/unistd_64.h; asm-generic/unistd.h for aarch64).
_X86_64 = {
    "clone": 56, "clone3": 435, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438, "setpriority": 141, "sched_setaffinity": 203, "sched_setscheduler": 144,
    "sched_setparam": 142, "sched_setattr": 314, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248,
    "request_key": 249, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "syslog": 103, "iopl": 172,
    "ioperm": 173, "open_by_handle_at": 304, "name_to_handle_at": 303, "quotactl": 179, "lookup_dcookie": 212,
    "vhangup": 153, "personality": 135, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "clock_adjtime": 305, "sethostname": 170, "setdomainname": 171, "uselib": 134, "ustat": 136, "sysfs": 139,
    "_sysctl": 156, "nfsservctl": 180, "migrate_pages": 256, "move_pages": 279, "mbind": 237,
    "set_mempolicy": 238, "process_madvise": 440,
}
_AARCH64 = {
    "clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "kcmp": 272, "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "setpriority": 140, "sched_setaffinity": 122, "sched_setscheduler": 119, "sched_setparam": 118,
    "sched_setattr": 274, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
    "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218,
    "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "syslog": 116, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "quotactl": 60, "lookup_dcookie": 18, "vhangup": 58, "personality": 92,
    "settimeofday": 170, "clock_settime": 112, "adjtimex": 171, "clock_adjtime": 266, "sethostname": 161,
    "setdomainname": 162, "nfsservctl": 42, "migrate_pages": 238, "move_pages": 239, "mbind": 235,
    "set_mempolicy": 237, "process_madvise": 440,
}
# machine -> (AUDIT_ARCH_*, numbers, lowest number of a foreign ABI sharing the architecture or None)
_ARCHES = {"x86_64": (0xC000003E, _X86_64, 0x40000000), "aarch64": (0xC00000B7, _AARCH64, None)}

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000  # NS..NET
# offsets in struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16


def build_filter(machine: str | None = None) -> tuple[bytes, int] | None:
    """The filter for `machine` (default: this one) as packed `struct sock_filter`s, and how many calls it refuses.

    Returns:
        (program bytes, number of refused system calls), or None on an architecture this module does not know.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    arch, numbers, foreign = _ARCHES[machine]
    refused = sorted({numbers[name] for name in REFUSED_CALLS if name in numbers})
    # Each entry: (code, jump-if-true label or 0, jump-if-false label or 0, k). Labels are resolved below.
    code: list[tuple[int, object, object, int]] = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ, 0, "deny", arch),
                                                   (_LD_W_ABS, 0, 0, _NR)]
    if foreign is not None:
        code.append((_JGE, "deny", 0, foreign))
    code += [(_JEQ, "deny", 0, number) for number in refused]
    code += [(_JEQ, "nosys", 0, numbers["clone3"]), (_JEQ, 0, "allow", numbers["clone"]),
             (_LD_W_ABS, 0, 0, _ARG0_LOW), (_JSET, "deny", 0, _CLONE_NEW), (_JSET, "allow", "deny", _CLONE_THREAD)]
    labels = {"allow": len(code), "deny": len(code) + 1, "nosys": len(code) + 2}
    code += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ERRNO | _ENOSYS)]
    packed = []
    for index, (op, true, false, k) in enumerate(code):
        jt = labels[true] - index - 1 if isinstance(true, str) else true
        jf = labels[false] - index - 1 if isinstance(false, str) else false
        assert 0 <= jt < 256 and 0 <= jf < 256, "a BPF jump reaches at most 255 instructions"
        packed.append(struct.pack("=HBBI", op, jt, jf, k))
    return b"".join(packed), len(refused) + 1  # + the clone that would make a process
