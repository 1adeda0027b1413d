"""What bounds one sandboxed kernel as a whole, and why the sandbox ended it.

- **A control group per kernel** (:class:`Box`): memory and processes bounded for the whole
  sandbox.

``RLIMIT_AS`` bounds one process; a kernel that forks, or fills its memory-backed ``/tmp``,
could still take the machine's memory, and the machine's out-of-memory killer would then end
*other students'* kernels. Where this machine lets the grader make control groups, the
launcher (:mod:`grader.grading.sandbox.kernel`) puts each kernel's sandbox into a fresh group
below its own (``memory`` and ``pids``, cgroup v1 or v2) with ``memory_gb`` and
``processes`` as limits, and reads afterwards whether the group's own limit ended it
(:meth:`Box.hit_memory_limit`) or the machine ran out of memory. Where it cannot (no
controller mounted, no permission, a v2 parent that cannot delegate), :meth:`Box.create`
returns ``None`` and the rlimits alone apply.

- **A watch on the kernel's folder** (:class:`Watch`): files and folders it makes there and the
  bytes it writes, counted twice a second; over ``kernel_files`` or ``kernel_disk_mb`` the
  kernel is ended (200,000 small files kept a worker in nbgrader's file listing 13 minutes).
  The executor counts them again after each cell (:func:`usage`), so a cell that wrote too
  much in less than half a second is the one that ends the kernel, not the next. The same
  watch ends a kernel whose group stays full of memory it cannot give back (the memory
  limit's decision, made before a busy machine spends a cell's time limit on it).
- **Why it ended** (:func:`cause`): its own memory limit, the folder limits, or the machine
  out of memory (the machine's out-of-memory killer, not the sandbox's limit: a grading
  fault, graded again later).

Only the standard library is used: the launcher imports this for every kernel start.
"""
from __future__ import annotations

import os
import signal
import stat
import threading
import time
from pathlib import Path

__all__ = ["Box", "Watch", "cause", "machine_oom_kills", "sweep", "usage", "FILES_LIMIT"]

_CONTROLLERS = ("memory", "pids")
FILES_LIMIT = "files-limit"   # why a kernel was ended, in the crash trace (crashes.dead_cause)


def machine_oom_kills() -> int:
    """How many processes this machine's out-of-memory killer has ended since boot."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _mounts() -> tuple[dict[str, tuple[str, str]], tuple[str, str] | None]:
    """``({controller: (mount point, root)}, (unified mount point, root) or None)``."""
    v1, v2 = {}, None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return v1, v2
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point, fstype, options = fields[3], fields[4], rest[0], rest[2].split(",")
        if fstype == "cgroup":
            for c in _CONTROLLERS:
                if c in options:
                    v1.setdefault(c, (point, root))
        elif fstype == "cgroup2" and v2 is None:
            v2 = (point, root)
    return v1, v2


def _own() -> dict[str, str]:
    """This process's group in each hierarchy: ``{"memory": "/a/b", ..., "": "/c"}``."""
    out = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _below(point: str, root: str, path: str) -> Path:
    rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return Path(point) / ("" if rel == "." else rel)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read_kv(path: Path) -> dict[str, int]:
    out = {}
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    except OSError:
        pass
    return out


class Box:
    """A control group (one folder per hierarchy) holding one kernel's sandbox."""

    def __init__(self, dirs: dict[str, Path], v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2

    @classmethod
    def create(cls, name: str, memory_bytes: int, processes: int) -> "Box | None":
        """A new group ``name`` below this process's own, with the limits set; ``None``
        where this machine does not allow it."""
        v1, v2 = _mounts()
        own = _own()
        box = None
        try:
            if "memory" in v1:
                dirs = {c: _below(*v1[c], own.get(c, "/")) / name for c in _CONTROLLERS if c in v1}
                box = cls(dirs, v2=False)
                for d in dirs.values():
                    d.mkdir()
                mem = dirs["memory"]
                _write(mem / "memory.limit_in_bytes", str(memory_bytes))
                if (mem / "memory.memsw.limit_in_bytes").exists():   # no swap either
                    _write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))
                if "pids" in dirs:
                    _write(dirs["pids"] / "pids.max", str(processes))
            elif v2 is not None:
                parent = _below(*v2, own.get("", "/"))
                have = (parent / "cgroup.subtree_control").read_text().split()
                if not {"memory", "pids"} <= set(have):
                    _write(parent / "cgroup.subtree_control", "+memory +pids")
                box = cls({"": parent / name}, v2=True)
                box.dirs[""].mkdir()
                d = box.dirs[""]
                _write(d / "memory.max", str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(processes))
            return box
        except OSError:
            if box is not None:
                box.remove()
            return None

    def add(self, pid: int) -> None:
        """Put process ``pid`` (before it starts the sandbox: its children follow) in."""
        for d in self.dirs.values():
            _write(d / "cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs.values():
            try:
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return found

    def peak(self) -> int | None:
        """The most memory the group held at once, in bytes (None where not recorded)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        d = self.dirs.get("" if self.v2 else "memory")
        try:
            return int((d / name).read_text()) if d is not None else None
        except (OSError, ValueError):
            return None

    def unreclaimable(self) -> tuple[int, int] | None:
        """``(bytes, limit)``: the group's memory that nothing but ending its processes frees
        (anonymous memory and memory-backed files: the sandbox has no swap), and its limit;
        None where not readable. The page cache is left out: the kernel drops it at the
        limit, and a group reading large files sits at its limit harmlessly."""
        d = self.dirs.get("" if self.v2 else "memory")
        if d is None:
            return None
        st = _read_kv(d / "memory.stat")
        held = (st.get("anon", 0) + st.get("shmem", 0)) if self.v2 else \
            (st.get("total_rss", 0) + st.get("total_shmem", 0))
        try:
            raw = (d / ("memory.max" if self.v2 else "memory.limit_in_bytes")).read_text().strip()
            return held, int(raw)
        except (OSError, ValueError):   # v2's "max": no limit
            return None

    def hit_memory_limit(self) -> bool:
        """Whether the group's own memory limit was reached and its out-of-memory killer
        ended a process in it (the student's doing, unlike the machine running out)."""
        if self.v2:
            ev = _read_kv(self.dirs[""] / "memory.events")
            return ev.get("oom_kill", 0) > 0 and (ev.get("oom", 0) > 0 or ev.get("max", 0) > 0)
        mem = self.dirs.get("memory")
        if mem is None:
            return False
        killed = _read_kv(mem / "memory.oom_control").get("oom_kill", 0)
        try:   # some kernels leave failcnt at 0: the peak reaching the limit says it too
            failed = int((mem / "memory.failcnt").read_text())
            peak = int((mem / "memory.max_usage_in_bytes").read_text())
            limit = int((mem / "memory.limit_in_bytes").read_text())
        except (OSError, ValueError):
            return killed > 0
        return killed > 0 and (failed > 0 or peak >= 0.9 * limit)

    def kill(self, within: float = 5.0) -> None:
        """End every process in the group (they are the sandbox's)."""
        end = time.monotonic() + within
        if self.v2 and (self.dirs[""] / "cgroup.kill").exists():
            try:
                _write(self.dirs[""] / "cgroup.kill", "1")
            except OSError:
                pass
        while time.monotonic() < end:
            left = self.pids()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left and remove the group's folders."""
        self.kill()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:       # busy while the last process is reaped
                    time.sleep(0.02)


def sweep(prefix: str) -> int:
    """Remove empty groups ``<prefix>...-<pid>`` below this process's own whose pid is gone
    (their launcher was killed before it could remove them); how many were removed."""
    v1, v2 = _mounts()
    own = _own()
    parents = [_below(*v1[c], own.get(c, "/")) for c in _CONTROLLERS if c in v1]
    if v2 is not None and not v1:
        parents.append(_below(*v2, own.get("", "/")))
    removed = 0
    for parent in parents:
        try:
            groups = [d for d in parent.iterdir() if d.name.startswith(prefix)]
        except OSError:
            continue
        for d in groups:
            pid = d.name.rsplit("-", 1)[-1]
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                continue
            try:
                d.rmdir()          # only an empty group: a process in it keeps it
                removed += 1
            except OSError:
                pass
    return removed


FULL = 0.95       # of the group's limit held unreclaimable: the group is out of memory
FULL_CHECKS = 2  # consecutive checks (half a second apart) before the kernel is ended


class Watch(threading.Thread):
    """Ends the kernel (``stop``) when its folder holds more than ``files`` entries or
    ``disk`` bytes more than when it started (``over`` = "files"), or when its control
    group ``box`` holds :data:`FULL` of its memory limit in memory that cannot be reclaimed
    (``over`` = "memory") for :data:`FULL_CHECKS` checks in a row.

    The second is what the group's own out-of-memory killer would decide, decided before the
    machine's kernel spends its time on it: a group at its limit whose pages are mostly the
    student's (memory-backed files, anonymous memory; no swap) can only give back the pages
    of the programs it runs, and each page it gives back is read in again at once. On a
    busy machine that went on past a cell's 30 s time limit (a CI run), so the student's
    feedback named the time limit instead of the memory limit it had reached."""

    def __init__(self, workdir: str, files: int, disk: int, stop, box: "Box | None" = None) -> None:
        super().__init__(daemon=True)
        self.workdir, self.stop, self.box = workdir, stop, box
        n, used = usage(workdir, 10**9)
        self.files, self.disk = n + files, used + disk
        self.over: str | None = None
        self.done = threading.Event()
        self.full = 0

    def run(self) -> None:
        while not self.done.wait(0.5):
            n, used = usage(self.workdir, self.files)
            if n > self.files or used > self.disk:
                self.over = "files"
                self.stop()
                return
            if self.out_of_memory():
                self.over = "memory"
                self.stop()
                return

    def out_of_memory(self) -> bool:
        """Whether the group has held :data:`FULL` of its limit for :data:`FULL_CHECKS`
        calls in a row (counted across calls)."""
        held = self.box.unreclaimable() if self.box is not None else None
        self.full = self.full + 1 if held is not None and held[0] >= FULL * held[1] else 0
        return self.full >= FULL_CHECKS


def usage(root: str, most: int) -> tuple[int, int]:
    """(entries, bytes on disk) below ``root``, counting no further than ``most`` entries."""
    n, used, todo = 0, 0, [root]
    while todo and n <= most:
        try:
            with os.scandir(todo.pop()) as it:
                for e in it:
                    n += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(e.path)
                    if n > most:
                        break
        except OSError:
            continue
    return n, used


def cause(end: dict, watch: Watch, box, oom_before: int) -> str | None:
    """Why the sandbox ended the kernel: "files", "memory" (its own limit) or
    "machine-oom" (the machine ran out of memory: not the submission's doing), or None."""
    if watch.over:
        return watch.over
    if end["signal"] != "SIGKILL":
        return None
    if box is not None and box.hit_memory_limit():
        return "memory"
    if machine_oom_kills() > oom_before:
        return "machine-oom"
    return None
