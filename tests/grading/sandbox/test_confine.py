"""The seccomp filter and the user namespace of grader.grading.sandbox.confine, without bubblewrap:
the numbers match this machine's headers, and a process under the filter gets EPERM for the
keyrings and ptrace while threads, fork and subprocesses still work. Needs no root."""
from __future__ import annotations

import errno
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grading.sandbox import confine

HEADERS = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
           "aarch64": "/usr/include/asm-generic/unistd.h"}


@pytest.mark.parametrize("arch", sorted(confine.NUMBERS))
def test_the_syscall_numbers_are_this_machines_headers(arch):
    header = Path(HEADERS[arch])
    if not header.exists() or (arch == "aarch64" and platform.machine() == "x86_64"
                               and not header.read_text().count("__NR_keyctl 219")):
        pytest.skip(f"no {arch} header here")
    found = dict(re.findall(r"#define __NR3?2?_(\w+)\s+(\d+)", header.read_text()))
    for name, nr in confine.NUMBERS[arch].items():
        assert int(found[name]) == nr, (arch, name)
    assert set(confine.DENIED) | set(confine.ENOSYS_CALLS) | {"clone"} == set(confine.NUMBERS[arch])


def test_the_program_is_whole_instructions_and_ends_in_allow():
    for arch in confine.NUMBERS:
        code = confine.program(arch)
        assert len(code) % 8 == 0 and len(code) // 8 < 4096
        assert code[-4:] == confine.RET_ALLOW.to_bytes(4, "little")
    with pytest.raises(OSError):
        confine.program("sparc")


PROBE = r"""
import ctypes, json, os, subprocess, sys, threading
sys.path.insert(0, {root!r})
from grader.grading.sandbox import confine
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = confine.NUMBERS[os.uname().machine]
def call(name, *args):
    ctypes.set_errno(0)
    return -ctypes.get_errno() if libc.syscall(nr[name], *args) < 0 else 0
def probe():
    return {{"add_key": call("add_key", b"user", b"course-test", b"x", 1, ctypes.c_int(-4)),
             "keyctl": call("keyctl", 0, ctypes.c_int(-3), 0),
             "ptrace": call("ptrace", 0, 0, 0, 0),
             "unshare": call("unshare", 0x10000000)}}
before = probe() if {before} else None
confine.install()
seen = {{"before": before, "after": probe()}}
t = threading.Thread(target=lambda: seen.setdefault("thread", True)); t.start(); t.join()
seen["child"] = subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True,
                               text=True).stdout.strip()
pid = os.fork()
if pid == 0:
    os._exit(3)
seen["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(seen))
"""


def test_under_the_filter_keyrings_and_ptrace_are_refused_and_processes_still_start():
    root = str(Path(__file__).resolve().parents[3])
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=root, before=False)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["after"] == {"add_key": -errno.EPERM, "keyctl": -errno.EPERM,
                             "ptrace": -errno.EPERM, "unshare": -errno.EPERM}
    assert seen["thread"] is True and seen["child"] == "7" and seen["fork"] == 3


def test_confine_runs_the_command_in_its_own_user_namespace_under_the_filter():
    script = Path(confine.__file__)
    out = subprocess.run([sys.executable, "-I", "-S", str(script), "--", "sh", "-c",
                          "readlink /proc/self/ns/user; grep Seccomp: /proc/self/status; id -u"],
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.split()
    assert out.returncode == 0, out.stderr
    if "no user namespace" not in out.stderr:           # where the machine allows one
        assert lines[0] != subprocess.run(["readlink", "/proc/self/ns/user"], capture_output=True,
                                          text=True).stdout.strip()
    assert "Seccomp:" in lines and lines[lines.index("Seccomp:") + 1] == "2"   # filter mode
    assert lines[-1] == str(os.getuid())                # the uid maps to itself
