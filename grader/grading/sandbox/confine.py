"""The last step into a sandbox: a user namespace of its own, a fresh keyring, a seccomp filter.

``python -I -S confine.py -- COMMAND...`` is what :func:`grader.grading.sandbox.kernel.bwrap_command`
runs inside bubblewrap, after ``setpriv`` (the slot's uid, no capabilities, no new privileges)
and ``prlimit``, for every kernel and every one of assignment 7's student ranks. It

1. moves into a **user namespace of its own** that maps the slot's uid and gid to themselves
   (files keep their owner; the kernel's user and user-session keyrings are the namespace's,
   so nothing the previous student of this slot, or another rank, put in a keyring is there);
2. **joins a new, empty session keyring** (nothing inherited from the grading process);
3. installs a **seccomp filter** (:func:`program`) that answers ``EPERM`` to what grading never
   needs: the keyrings (``add_key``, ``keyctl``, ``request_key``), ``ptrace`` and reading other
   processes' memory, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (whose
   operations seccomp cannot see), loading kernels or modules, every mount call, ``chroot``,
   ``unshare``/``setns`` and ``clone`` with a namespace flag (the sandbox is already set up),
   ``clone3`` (``ENOSYS``, so the C library falls back to ``clone``, whose flags the filter can
   read); a foreign architecture's system calls (x86-64's x32 or i386 ABI) end the process;
4. ``exec`` s ``COMMAND`` (the kernel or the rank: its capabilities in the new namespace are
   dropped by ``exec``, as for any unprivileged user).

It refuses to run ``COMMAND`` if the filter cannot be installed. If the machine allows no user
namespace it says so on stderr and goes on: the filter alone keeps every keyring out of reach.
Only the standard library, and no import of the course (``-I -S``: nothing of the student's
can be on the path): the filter is written here with :mod:`struct` (classic BPF, as
``seccomp(2)`` reads it), for x86-64 and aarch64.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

__all__ = ["DENIED", "ENOSYS_CALLS", "NUMBERS", "AUDIT_ARCH", "program", "install", "main"]

# what grading never needs; answered EPERM
DENIED = ("add_key", "keyctl", "request_key",
          "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
          "bpf", "perf_event_open", "userfaultfd",
          "io_uring_setup", "io_uring_enter", "io_uring_register",
          "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
          "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr", "open_by_handle_at",
          "unshare", "setns", "swapon", "swapoff", "reboot", "acct", "syslog", "quotactl",
          "lookup_dcookie")
ENOSYS_CALLS = ("clone3",)     # its flags are in memory: "not implemented" makes libc use clone
CLONE_NAMESPACES = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET

# system call numbers (x86-64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: the generic
# table, include/uapi/asm-generic/unistd.h); tests/grading/sandbox/test_confine.py compares
# them with this machine's headers
NUMBERS = {
    "x86_64": {"add_key": 248, "keyctl": 250, "request_key": 249, "ptrace": 101,
               "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "bpf": 321,
               "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
               "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 246,
               "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
               "delete_module": 176, "mount": 165, "umount2": 166, "pivot_root": 155,
               "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430,
               "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
               "open_by_handle_at": 304, "unshare": 272, "setns": 308, "swapon": 167,
               "swapoff": 168, "reboot": 169, "acct": 163, "syslog": 103, "quotactl": 179,
               "lookup_dcookie": 212, "clone": 56, "clone3": 435},
    "aarch64": {"add_key": 217, "keyctl": 219, "request_key": 218, "ptrace": 117,
                "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "bpf": 280,
                "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
                "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 104,
                "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
                "delete_module": 106, "mount": 40, "umount2": 39, "pivot_root": 41,
                "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430,
                "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
                "open_by_handle_at": 265, "unshare": 97, "setns": 268, "swapon": 224,
                "swapoff": 225, "reboot": 142, "acct": 89, "syslog": 116, "quotactl": 60,
                "lookup_dcookie": 18, "clone": 220, "clone3": 435},
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# classic BPF (linux/filter.h, linux/seccomp.h)
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0_LOW = 0, 4, 16    # offsets in struct seccomp_data (little-endian)
_X32_BIT = 0x40000000


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(arch: str | None = None) -> bytes:
    """The filter as ``struct sock_filter[]`` bytes for ``arch`` (default: this machine)."""
    arch = arch or platform.machine()
    if arch not in NUMBERS:
        raise OSError(f"no seccomp filter for the {arch} architecture (x86_64, aarch64)")
    nr = NUMBERS[arch]
    out = [_insn(_LD_W_ABS, _ARCH),
           _insn(_JEQ, AUDIT_ARCH[arch], jt=1),           # this machine's ABI: go on
           _insn(_RET, RET_KILL_PROCESS),
           _insn(_LD_W_ABS, _NR)]
    if arch == "x86_64":                                   # x32 calls share the arch value
        out += [_insn(_JGE, _X32_BIT, jf=1), _insn(_RET, RET_KILL_PROCESS)]
    for name in DENIED:
        out += [_insn(_JEQ, nr[name], jf=1), _insn(_RET, RET_ERRNO | errno.EPERM)]
    for name in ENOSYS_CALLS:
        out += [_insn(_JEQ, nr[name], jf=1), _insn(_RET, RET_ERRNO | errno.ENOSYS)]
    out += [_insn(_JEQ, nr["clone"], jf=3),                # clone with a namespace flag
            _insn(_LD_W_ABS, _ARG0_LOW),
            _insn(_JSET, CLONE_NAMESPACES, jf=1),
            _insn(_RET, RET_ERRNO | errno.EPERM),
            _insn(_RET, RET_ALLOW)]
    return b"".join(out)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_CLONE_NEWUSER = 0x10000000
_KEYCTL_JOIN_SESSION_KEYRING = 1


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def install(code: bytes | None = None) -> None:
    """Install the filter on this process (and so on everything it will start); raises OSError."""
    code = program() if code is None else code
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Fprog(len(code) // 8, ctypes.addressof(buf))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"cannot install the seccomp filter: {os.strerror(e)}")


def own_user_namespace() -> str | None:
    """Move into a new user namespace mapping this uid and gid to themselves; ``None``, or why not."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    if libc.unshare(_CLONE_NEWUSER) != 0:
        return os.strerror(ctypes.get_errno())
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1\n"),
                           ("gid_map", f"{gid} {gid} 1\n")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError as e:
        return f"the namespace's maps: {e}"
    return None


def new_session_keyring() -> str | None:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    nr = NUMBERS.get(platform.machine(), {}).get("keyctl")
    if nr is None or libc.syscall(nr, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        return os.strerror(ctypes.get_errno()) if nr else "unknown architecture"
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("usage: python -I -S confine.py -- COMMAND...", file=sys.stderr)
        return 2
    why = own_user_namespace()
    if why:
        print(f"sandbox: no user namespace of its own ({why}); the seccomp filter still "
              f"refuses every keyring call", file=sys.stderr)
    new_session_keyring()     # a failure leaves the inherited one, unreachable once filtered
    try:
        install()
    except OSError as e:
        print(f"sandbox: refusing to run without the seccomp filter: {e}", file=sys.stderr)
        return 126
    try:
        os.execvp(argv[1], argv[1:])
    except OSError as e:
        print(f"sandbox: cannot run {argv[1]}: {e}", file=sys.stderr)
        return 127
    return 127   # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
