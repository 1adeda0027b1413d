"""Where grading's CPU goes: a command's processes' CPU time, summed by kind.

``sudo .venv/bin/python bench/grading_cpu.py -- .venv/bin/python bench/grading_class.py --quiet --skip-plain``

Runs the command under the kernel's process accounting (``acct(2)``: one record per process
as it ends, with its user + system CPU time, orphans included), while a thread reads
each process's command line from ``/proc`` every 50 ms (the record names only the
executable). Prints the wall-clock time, the CPU of every process that ended meanwhile, by
kind (kernels with their sandbox launchers, grading workers and the spawner, judges, plain
nbgrader, ...), and the machine's CPU use per second. Needs root; it records every process on
the machine, so run it where nothing else runs. A process shorter than the polling interval
may go unnamed (``other``). The kernel counts a process's CPU time by sampling it at each
clock tick, and on a virtual machine leaves out the ticks the host took: on a busy or shared
machine a process's record can fall well short of the CPU it used (a 0.4 s burn was once
recorded as 0.1 s), so compare runs made on one quiet machine.
"""
from __future__ import annotations

import collections
import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time

KINDS = [   # first match wins: a kernel's bwrap carries "ipykernel" in its command line
    ("kernel (sandbox launcher, bwrap, confine, ipykernel)",
     r"ipykernel|sandbox\.(ip)?kernel|confine\.py"),
    ("judge (fork server and judge processes)", r"forkserver|judge"),
    ("grading workers, their feedback children, the spawner", r"run\.worker|run\.spawn"),
    ("plain nbgrader", r"-m nbgrader|alembic"),
    ("the command itself", None),
]
RECORD = struct.Struct("<BBHIIIIIIfHH")   # struct acct_v3, up to ac_stime; ac_comm at 48
RECORD_SIZE = 64                           # sizeof(struct acct_v3)
AHZ = 100                                  # the records' clock ticks per second


def _comp(v: int) -> int:
    """comp_t: 13-bit mantissa, 3-bit base-8 exponent."""
    return (v & 0x1FFF) << (3 * (v >> 13))


def kind_of(name: str) -> str:
    """The kind of a process other than the command itself, from its command line."""
    return next((k for k, pat in KINDS if pat and re.search(pat, name)),
                f"other ({os.path.basename(name.split()[0]) if name.split() else '?'})")


def tally(data: bytes, names: dict[int, str], own: int, me: int
          ) -> tuple[collections.Counter, collections.Counter]:
    """Seconds of CPU and processes by kind, from acct v3 records; ``own`` is the command's pid,
    ``names`` the command lines seen (a process not seen is named by the record's ``ac_comm``).
    ``me`` is this script's pid: the kernel writes a record for the process that turns
    accounting off, which is left out."""
    total: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for i in range(0, len(data) - RECORD_SIZE + 1, RECORD_SIZE):
        f = RECORD.unpack_from(data, i)
        pid, ut, st = f[6], f[10], f[11]
        if pid == me:
            continue
        comm = data[i + 48:i + RECORD_SIZE].split(b"\0")[0].decode(errors="replace")
        kind = KINDS[-1][0] if pid == own else kind_of(names.get(pid, comm))
        total[kind] += (_comp(ut) + _comp(st)) / AHZ
        count[kind] += 1
    return total, count


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__)
        return 2
    if os.geteuid() != 0:
        print("process accounting needs root", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    fd, path = tempfile.mkstemp(prefix="grading-acct-")
    os.close(fd)
    names: dict[int, str] = {}
    busy: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.05):
            for p in os.listdir("/proc"):
                if p.isdigit():
                    try:
                        with open(f"/proc/{p}/cmdline", "rb") as f:
                            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        continue
                    if cmd:
                        names[int(p)] = cmd

    def use() -> None:
        def cpu() -> tuple[int, int]:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            return sum(v), v[3] + v[4]
        prev = cpu()
        while not stop.wait(1.0):
            cur = cpu()
            busy.append(1 - (cur[1] - prev[1]) / max(1, cur[0] - prev[0]))
            prev = cur

    threads = [threading.Thread(target=poll, daemon=True), threading.Thread(target=use, daemon=True)]
    for t in threads:
        t.start()
    if libc.acct(path.encode()) != 0:
        print(f"acct failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        os.unlink(path)
        return 2
    t0 = time.perf_counter()
    finished = False
    try:
        proc = subprocess.Popen(argv)
        names[proc.pid] = " ".join(argv)
        rc = proc.wait()
        finished = True
    except OSError as e:          # a command that cannot be started: nothing to measure
        print(f"cannot start {argv[0]!r}: {e.strerror}", file=sys.stderr)
        return 2
    finally:
        wall = time.perf_counter() - t0
        time.sleep(0.3)
        libc.acct(None)
        stop.set()
        with open(path, "rb") as f:   # read only after a finished command
            data = f.read() if finished else b""
        os.unlink(path)
    total, count = tally(data, names, proc.pid, os.getpid())
    print(f"wall clock {wall:.1f} s, exit code {rc}; {sum(count.values())} processes ended, "
          f"{sum(total.values()):.1f} s of CPU ({os.cpu_count()} cores)")
    for kind, s in total.most_common():
        if s >= 0.05 or not kind.startswith("other ("):   # every named kind, even near 0 s
            print(f"  {s:7.1f} s  {count[kind]:5d} processes  {kind}")
    print("machine busy, % per second: " + " ".join(str(round(100 * b)) for b in busy))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
