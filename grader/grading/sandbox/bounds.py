"""What bounds one sandboxed kernel as a whole, and why the sandbox ended it.

- **A control group per kernel** (:class:`Box`): memory and processes bounded for the whole
  sandbox; **and one per job**, made by the grading worker with the CPU controller at the
  same weight for every job (:data:`JOB_ENV` names it): the kernel's, the judge's and the
  ranks' groups are made inside it, so a job holds one ``memory_gb`` and one CPU share
  however many processes it starts. Memory is bounded by these groups, not the address
  space (:func:`memory_groups`).
- **The machine's fault** (:func:`cause` for a kill, :func:`starved` for a time limit): decided
  only on the kernel's accounting of the group, which its processes cannot forge.

``RLIMIT_AS`` bounds one process; a kernel that forks, or fills its memory-backed ``/tmp``,
could still take the machine's memory, and the machine's out-of-memory killer would then end
*other students'* kernels. Where this machine lets the grader make control groups, the
launcher (:mod:`grader.grading.sandbox.kernel`) puts each kernel's sandbox into a fresh group
below its own (``memory`` and ``pids``, cgroup v1 or v2) with ``memory_gb`` and
``processes`` as limits, and reads afterwards whether the group's own limit ended it
(:meth:`Box.hit_memory_limit`) or the machine ran out of memory. Where it cannot (no
controller mounted, no permission, a v2 parent that cannot delegate), :meth:`Box.create`
returns ``None`` and the rlimits alone apply.

- **A watch on what the kernel can write** (:class:`Watch`): files and folders it makes in its
  folder and the bytes it writes there (files it deleted but holds open included,
  :func:`held_deleted`), plus the bytes held in its memory-backed ``/tmp`` and
  ``/dev/shm`` (:func:`scratch_used`: one budget for every place it can write), counted twice
  a second; over ``kernel_files`` or ``kernel_disk_mb`` the kernel is ended (200,000 small
  files kept a worker in nbgrader's file listing 13 minutes).
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

import errno
import json
import os
import signal
import stat
import threading
import time
from pathlib import Path

__all__ = ["Box", "Watch", "cause", "machine_oom_kills", "sweep", "usage", "open_scratch",
           "scratch_used", "held_deleted", "FILES_LIMIT"]

__all__ += ["CpuSample", "starved", "memory_groups", "JOB_ENV", "MACHINE_OOM", "STARVED"]
_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")   # cpu, cpuacct: where mounted
_NEEDED = ("memory", "pids")
JOB_ENV = "COURSE_JOB_CGROUP"   # the job's group (JSON {controller: folder}): Box.create nests
MACHINE_OOM = "machine-oom"     # why: the machine's out-of-memory killer (a grading fault)
STARVED = "machine-starved"     # why: a time limit reached while other work held the CPU
CPU_WEIGHT_V1, CPU_WEIGHT_V2 = 1024, 100   # every job's group the same share (the defaults)
FILES_LIMIT = "files-limit"   # why a kernel was ended, in the crash trace (crashes.dead_cause)


def machine_oom_kills() -> int:
    """How many processes any out-of-memory killer of this machine has ended since boot (a
    group's own at its limit too: a student's processes can raise it, so it is never
    evidence that the machine ran out; only shown in logs)."""
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


def _job_parents(v1: dict, v2) -> dict[str, Path] | None:
    """The job's group (:data:`JOB_ENV`, set by the grading worker) where every folder it
    names is a group of this machine's hierarchies; else None."""
    raw = os.environ.get(JOB_ENV)
    if not raw:
        return None
    try:
        dirs = {c: Path(d) for c, d in json.loads(raw).items()}
    except (ValueError, AttributeError, TypeError):
        return None
    points = {c: Path(v1[c][0]) for c in v1} | ({"": Path(v2[0])} if v2 else {})
    for c, d in dirs.items():
        if c not in points or points[c] not in d.parents or not (d / "cgroup.procs").is_file():
            return None
    return dirs


class Box:
    """A control group (one folder per hierarchy) holding one kernel's sandbox, a judge, a
    rank, or a whole job (:meth:`create` with ``cpu=True``, the others below it)."""

    def __init__(self, dirs: dict[str, Path], v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2

    def _folders(self) -> list[Path]:
        """Each folder once (v1 may mount several controllers together: ``cpu,cpuacct``)."""
        return list(dict.fromkeys(self.dirs.values()))

    @classmethod
    def create(cls, name: str, memory_bytes: int, processes: int | None,
               cpu: bool = False) -> "Box | None":
        """A new group ``name`` with the limits set (``processes`` None: no limit of its
        own), below the job's group where the grading worker made one (:data:`JOB_ENV`: so a
        job's kernel and judge share its memory limit and CPU share), else below this
        process's own; ``None`` where this machine does not allow it. ``cpu``: give it the
        CPU controller with the same weight as every other job's (fair share of the CPU
        between jobs, whatever number of processes each runs)."""
        v1, v2 = _mounts()
        own = _own()
        job = _job_parents(v1, v2)
        box = None
        try:
            if "memory" in v1:
                dirs = {c: ((job[c] if job and c in job else _below(*v1[c], own.get(c, "/")))
                            / name) for c in _CONTROLLERS if c in v1}
                box = cls(dirs, v2=False)
                for d in box._folders():
                    d.mkdir()
                mem = dirs["memory"]
                _write(mem / "memory.limit_in_bytes", str(memory_bytes))
                if (mem / "memory.memsw.limit_in_bytes").exists():   # no swap either
                    _write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))
                if "pids" in dirs and processes is not None:
                    _write(dirs["pids"] / "pids.max", str(processes))
                if cpu and "cpu" in dirs:
                    _write(dirs["cpu"] / "cpu.shares", str(CPU_WEIGHT_V1))
            elif v2 is not None:
                parent = job[""] if job and "" in job else _below(*v2, own.get("", "/"))
                have = set((parent / "cgroup.subtree_control").read_text().split())
                offered = set((parent / "cgroup.controllers").read_text().split())
                want = {"memory", "pids"} | ({"cpu"} & offered)
                if not want <= have:
                    _write(parent / "cgroup.subtree_control",
                           " ".join(f"+{c}" for c in sorted(want - have)))
                box = cls({"": parent / name}, v2=True)
                box.dirs[""].mkdir()
                d = box.dirs[""]
                _write(d / "memory.max", str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                if processes is not None:
                    _write(d / "pids.max", str(processes))
                if cpu and (d / "cpu.weight").exists():
                    _write(d / "cpu.weight", str(CPU_WEIGHT_V2))
            return box
        except OSError:
            if box is not None:
                box.remove()
            return None

    @classmethod
    def of_job(cls) -> "Box | None":
        """The job's group named by :data:`JOB_ENV` (made by the grading worker), or None."""
        v1, v2 = _mounts()
        job = _job_parents(v1, v2)
        return None if job is None else cls(job, v2="" in job)

    def env(self) -> dict[str, str]:
        """``{JOB_ENV: ...}``: what makes the groups the job's processes create its own."""
        return {JOB_ENV: json.dumps({c: str(d) for c, d in self.dirs.items()})}

    def add(self, pid: int) -> None:
        """Put process ``pid`` (before it starts the sandbox: its children follow) in."""
        for d in self._folders():
            _write(d / "cgroup.procs", str(pid))

    def cpu_sample(self) -> "CpuSample | None":
        """The group's CPU use so far (its processes and groups below it) and how long its
        threads now alive have waited, runnable, for a CPU; None without the CPU accounting.

        Both are the kernel's accounting of this group, not anything its processes report:
        a process can spend CPU, or sleep, but cannot make its group's share of the CPU
        smaller while it waits for one (the share is the group's weight, the same for
        every job, whatever its processes' number or nice value)."""
        if self.v2:
            used = _read_kv(self.dirs[""] / "cpu.stat").get("usage_usec")
            used = None if used is None else used * 1000
        else:
            d = self.dirs.get("cpuacct")
            try:
                used = int((d / "cpuacct.usage").read_text()) if d is not None else None
            except (OSError, ValueError):
                used = None
        if used is None:
            return None
        waited = 0
        for tid in self._threads():
            try:
                waited += int(Path(f"/proc/{tid}/schedstat").read_text().split()[1])
            except (OSError, ValueError, IndexError):
                pass
        return CpuSample(time.monotonic(), used, waited)

    def _threads(self) -> set[int]:
        """Every thread in the group and the groups below it."""
        name = "cgroup.threads" if self.v2 else "tasks"
        root = self.dirs["" if self.v2 else ("cpuacct" if "cpuacct" in self.dirs else "memory")]
        found: set[int] = set()
        for dirpath, _, files in os.walk(root):
            if name in files:
                try:
                    found |= {int(t) for t in (Path(dirpath) / name).read_text().split()}
                except (OSError, ValueError):
                    pass
        return found

    def oom_killed(self) -> int:
        """How many of the group's processes an out-of-memory killer ended (any: the
        group's own, a parent group's, or the machine's)."""
        if self.v2:
            return _read_kv(self.dirs[""] / "memory.events").get("oom_kill", 0)
        mem = self.dirs.get("memory")
        return _read_kv(mem / "memory.oom_control").get("oom_kill", 0) if mem else 0

    def reached_limit(self) -> bool:
        """Whether the group's own memory use reached its limit (the kernel's count of
        charges refused at the limit, v1's ``failcnt``, v2's ``max`` and ``oom`` events):
        something only its own processes do."""
        if self.v2:
            ev = _read_kv(self.dirs[""] / "memory.events")
            return ev.get("oom", 0) > 0 or ev.get("max", 0) > 0
        mem = self.dirs.get("memory")
        try:
            failed = int((mem / "memory.failcnt").read_text())
            peak = int((mem / "memory.max_usage_in_bytes").read_text())
            limit = int((mem / "memory.limit_in_bytes").read_text())
        except (OSError, ValueError, TypeError):
            return False
        return failed > 0 or peak >= 0.9 * limit   # some kernels leave failcnt at 0

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self._folders():
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
        """Whether the group's own memory limit, or that of a grading group it is inside (a
        rank's judge's, its job's: ``course-*``), was reached and an out-of-memory killer
        ended a process in it (the student's doing, unlike the machine running out)."""
        return self.oom_killed() > 0 and any(b.reached_limit() for b in self._enclosing())

    def _enclosing(self) -> list["Box"]:
        """This group and the grading groups (``course-*``) it is inside, innermost first."""
        out: list[Box] = [self]
        dirs = dict(self.dirs)
        while all(d.parent.name.startswith("course-") for d in dirs.values()):
            dirs = {c: d.parent for c, d in dirs.items()}
            out.append(Box(dirs, self.v2))
        return out

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
        for d in self._folders():
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
    """Ends the kernel (``stop``) when its folder holds more than ``files`` entries, or its
    folder and its memory-backed folders (``scratch``: descriptors from :func:`open_scratch`,
    added once the sandbox is up) hold ``disk`` bytes more than when it started (``over`` =
    "files"), or when its control
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
        self.scratch: list[int] = []
        self.dev = os.stat(workdir).st_dev
        self.uid: int | None = None   # the sandbox's uid: its processes, where there is no box
        self.over: str | None = None
        self.done = threading.Event()
        self.full = 0

    def run(self) -> None:
        while not self.done.wait(0.5):
            n, used = usage(self.workdir, self.files)
            used += scratch_used(self.scratch) + held_deleted(self.pids(), self.dev)
            if n > self.files or used > self.disk:
                self.over = "files"
                self.stop()
                return
            if self.out_of_memory():
                self.over = "memory"
                self.stop()
                return

    def pids(self) -> set[int]:
        """The sandbox's processes: its group's, or where there is none, its uid's."""
        if self.box is not None:
            return self.box.pids()
        if self.uid is None:
            return set()
        found = set()
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and os.stat(f"/proc/{d}").st_uid == self.uid:
                    found.add(int(d))
            except OSError:
                pass
        return found

    def out_of_memory(self) -> bool:
        """Whether the group has held :data:`FULL` of its limit for :data:`FULL_CHECKS`
        calls in a row (counted across calls)."""
        held = self.box.unreclaimable() if self.box is not None else None
        self.full = self.full + 1 if held is not None and held[0] >= FULL * held[1] else 0
        return self.full >= FULL_CHECKS


def usage(root: str, most: int) -> tuple[int, int]:
    """(entries, bytes on disk) below ``root``, counting no further than ``most`` entries.

    The kernel can write below ``root`` while this (root) counts, so no path below it is
    resolved: each folder is opened by name relative to its parent's descriptor, without
    following a link (a folder swapped for a link after it was listed is not entered), and
    nothing but folders is opened. One descriptor is held per level; a tree too deep for this
    process's open files counts as over ``most``."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        top = os.open(root, flags)
    except OSError:
        return 0, 0
    n, used = 0, 0
    stack: list[tuple[int, list[str]]] = []
    fd = top
    while True:
        subdirs: list[str] = []
        try:
            with os.scandir(fd) as it:
                for e in it:
                    n += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        subdirs.append(e.name)
                    if n > most:
                        break
        except OSError:
            pass
        stack.append((fd, subdirs))
        fd = -1
        while stack and n <= most and fd < 0:
            parent, names = stack[-1]
            if not names:
                os.close(parent)
                stack.pop()
                continue
            try:
                fd = os.open(names.pop(), flags, dir_fd=parent)
            except OSError as e:
                if e.errno == errno.EMFILE:   # too deep to count: over the limit
                    n = most + 1
        if fd < 0:
            break
    for parent, _ in stack:
        os.close(parent)
    if fd >= 0:
        os.close(fd)
    return n, used


def open_scratch(init_pid: int, folders: tuple[str, ...]) -> list[int]:
    """Descriptors of a sandbox's memory-backed ``folders`` (``/tmp``, ``/dev/shm``), opened
    through ``/proc/<init_pid>/root`` once the sandbox is set up (its init has a child).

    ``init_pid`` is bubblewrap's reaper: the kernel cannot change its mounts (its own mount
    calls are refused, and would be in a namespace of its own), and cannot replace a mount
    point; the last name is opened without following a link all the same. A folder that
    cannot be opened is left out (the budget then covers the others)."""
    fds = []
    for folder in folders:
        try:
            fds.append(os.open(f"/proc/{init_pid}/root{folder}",
                               os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC))
        except OSError:
            pass
    return fds


def scratch_used(fds: list[int]) -> int:
    """Bytes held in the file systems (tmpfs) open as ``fds``: the file system's own count,
    so a file deleted while still open counts as long as it holds memory, which a walk
    over the folder would miss."""
    used = 0
    for fd in fds:
        try:
            st = os.fstatvfs(fd)
        except OSError:
            continue
        used += (st.f_blocks - st.f_bfree) * st.f_frsize
    return used


def held_deleted(pids, dev: int) -> int:
    """Bytes of regular files on device ``dev`` (the kernel's folder's) that processes
    ``pids`` hold open after deleting them: a walk over the folder does not see them, and
    they fill the disk all the same. Each descriptor is looked at with ``stat`` through
    ``/proc/<pid>/fd`` (the file itself; nothing is opened)."""
    seen: set[int] = set()
    used = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_nlink == 0 and st.st_dev == dev and stat.S_ISREG(st.st_mode)
                    and st.st_ino not in seen):
                seen.add(st.st_ino)
                used += st.st_blocks * 512
    return used


def cause(end: dict, watch: "Watch | None", box, oom_before: int = 0) -> str | None:
    """Why the sandbox ended the kernel (or rank): "files", "memory" (its own limit, or its
    job's), :data:`MACHINE_OOM` (the machine ran out of memory: not the submission's doing),
    or None (the submission's own end: a crash, a kill, ``os._exit``).

    The one place that blames the machine for a kill, and only on evidence about this
    group that its processes cannot produce: an out-of-memory killer ended one of them
    (the kernel's count for this group) while neither the group nor its job had reached its
    memory limit, which only the machine's killer does. The machine-wide count
    (``oom_before``, :func:`machine_oom_kills`) is not evidence: every group's own killer
    raises it, so another job at its limit, or the student's own ranks, would make any kill
    look like the machine's. Without a group there is no evidence: the end is the
    submission's. (The starved time limit, :func:`starved`, is the same rule for the CPU.)"""
    if watch is not None and watch.over:
        return watch.over
    if end["signal"] != "SIGKILL" or box is None:
        return None
    if box.hit_memory_limit():
        return "memory"
    if box.oom_killed() > 0:
        return MACHINE_OOM
    return None



def memory_groups(settings: dict | None = None) -> bool:
    """Whether this process can make memory control groups here (the memory controller
    mounted, its parent group writable: root); ``settings["cgroups"]`` False says no.
    Where it can, memory is bounded by the group alone, not by the address space: an
    address-space limit of ``memory_gb`` counts what a process maps, not what it holds, and
    stopped ``import torch`` and ``import paddle`` at 1 GB (issue 37)."""
    if settings is not None and not settings.get("cgroups", True):
        return False
    v1, v2 = _mounts()
    own, job = _own(), _job_parents(v1, v2)
    if "memory" in v1:
        parent = job["memory"] if job and "memory" in job else _below(*v1["memory"],
                                                                      own.get("memory", "/"))
    elif v2 is not None:
        parent = job[""] if job and "" in job else _below(*v2, own.get("", "/"))
        try:
            if "memory" not in (parent / "cgroup.controllers").read_text().split():
                return False
        except OSError:
            return False
    else:
        return False
    return parent.is_dir() and os.access(parent, os.W_OK)

class CpuSample(tuple):
    """``(monotonic time, CPU used, time waited runnable)``, in s, ns, ns: :meth:`Box.cpu_sample`."""

    def __new__(cls, t: float, used: int, waited: int):
        return super().__new__(cls, (t, used, waited))


STARVED_WAIT = 0.25   # of the wall time spent runnable and waiting for a CPU, at least
STARVED_USE = 0.5     # of its fair share of the CPU used, at most


def starved(before: CpuSample | None, after: CpuSample | None, fair_cores: float) -> bool:
    """Whether a job whose time limit ran out between two samples of its group was kept from
    the CPU by other work: its threads waited, runnable, for at least :data:`STARVED_WAIT`
    of the time, and the group used less than :data:`STARVED_USE` of ``fair_cores`` (a
    core, or the machine's cores over the workers when fewer) in that time.

    The same rule as :func:`cause`: only the group's own accounting counts. A submission
    that sleeps or waits for a lock does not wait for a CPU; one that runs many processes
    of its own makes them wait for each other, but its group then gets its whole share
    (the CPU controller gives every job's group the same weight). Only other groups
    holding the CPU (other jobs past their share, or anything else on the machine) leave
    a waiting group below its share. Without the CPU accounting (None) there is no
    evidence: False."""
    if before is None or after is None:
        return False
    wall = after[0] - before[0]
    if wall <= 0:
        return False
    used = (after[1] - before[1]) / 1e9
    waited = max(0, after[2] - before[2]) / 1e9
    return waited >= STARVED_WAIT * wall and used < STARVED_USE * fair_cores * wall
