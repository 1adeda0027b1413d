"""The course's grading configuration: ``exercises/course.toml``, the one documented place
for the course id, limits, isolation and the gradebook URL.

``load(course)`` reads it (missing keys take the defaults below, a missing file means all
defaults); unknown keys are an error, so a typo does not silently leave a default in force.
Command-line options of ``python -m grader.grading`` override single values via
:func:`with_overrides`.

How a setting travels, the cell time limit for instance (``[limits] cell_timeout_s``):

1. ``course.toml`` -> :func:`load` -> ``GradingConfig.limits.cell_timeout_s``; a run's
   ``--cell-timeout`` replaces it with :func:`with_overrides` (``grade_course``), and each
   grading worker process gets the same overrides (``--overrides``, JSON) and applies them
   the same way to its own :func:`load`;
2. the values nbgrader needs become nbgrader (traitlets) configuration in one function,
   :func:`grader.grading.sandbox.crashes.autograde_config` (``Execute.timeout``, the output
   and folder limits, the judged executor), merged over the course's ``nbgrader_config.py``
   by the worker (:mod:`grader.grading.run.item`), and called by ``nbgrader_config.py``
   itself with :func:`load`'s values, so ``nbgrader autograde`` by hand and the formgrader
   grade under the same limits;
3. the kernel's own limits (memory, CPU time, processes, files) go to the sandbox's launcher
   in its settings file (:func:`grader.grading.sandbox.setup.prepare`).

The private overlay (``[overlay] folder``, :mod:`grader.grading.overlay`) is read from
``course.toml`` by each reader itself (release and grading through ``nbgrader_config.py``,
the judge through :mod:`grader.grading.hidden`, the pipeline's cache key), so that every path
sees the same source notebooks and hidden checks; :func:`load` checks it once per process
(an absolute path to a folder outside the course, out of every sandbox's reach).

The course id (``[gradebook] course_id``) travels the same way: ``nbgrader_config.py``
sets ``CourseDirectory.course_id`` from :func:`load`, the hub reads it from there, and the
pipeline opens the gradebook with :meth:`GradingConfig.gradebook`. No setting travels in
an environment variable.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = ["Limits", "SubmissionLimits", "SandboxConfig", "GradingConfig", "load",
           "with_overrides", "check", "FILENAME", "DEFAULT_COURSE_ID"]

FILENAME = "course.toml"
DEFAULT_COURSE_ID = "default_course"   # nbgrader's own, for a course folder without course.toml


@dataclass(frozen=True)
class Limits:
    cell_timeout_s: int = 60          # per cell (nbgrader's Execute.timeout)
    notebook_timeout_s: float = 900   # one student's assignment, all attempts
    memory_gb: float = 4.0            # a job's processes together (its control group)
    cpu_seconds: int = 600            # RLIMIT_CPU of the kernel (SIGXCPU ends it)
    processes: int = 512              # RLIMIT_NPROC (threads count too) per sandbox uid
    file_size_mb: int = 64            # RLIMIT_FSIZE (writes beyond raise OSError EFBIG)
    open_files: int = 1024            # RLIMIT_NOFILE
    output_mb: float = 4.0            # a notebook's outputs, in all; also one kernel message
    kernel_files: int = 2000          # files and folders a kernel may make in its folder
    kernel_disk_mb: int = 512         # MB a kernel may hold: its folder, /tmp and /dev/shm together
    feedback_timeout_s: float = 120   # generating one student's feedback page
    kernel_threads: int = 1           # BLAS/OpenMP threads of each kernel (and a7 rank)


@dataclass(frozen=True)
class SubmissionLimits:
    """What is read of a submission (``[submission]``): more is refused with the reason."""
    max_files: int = 100              # files in one student's assignment folder
    max_file_mb: float = 16.0         # one file
    max_total_mb: float = 64.0        # all files of one assignment
    max_notebook_mb: float = 16.0     # one notebook
    max_json_depth: int = 64          # nesting of a notebook's JSON
    max_json_items: int = 1_000_000   # values in a notebook's JSON
    max_id_length: int = 64           # student and assignment ids (folder names)


@dataclass(frozen=True)
class SandboxConfig:
    mode: str = "auto"                # "auto" / "bwrap": isolate; "none": trusted code only
    uid_base: int = 61000             # worker slot k runs its kernels as uid/gid uid_base + k
    extra_ro: tuple[str, ...] = ()    # more read-only paths the kernel may see


@dataclass(frozen=True)
class GradingConfig:
    course: Path
    db_url: str
    workers: int
    course_id: str = DEFAULT_COURSE_ID
    limits: Limits = field(default_factory=Limits)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    submission: SubmissionLimits = field(default_factory=SubmissionLimits)
    overlay: Path | None = None       # [overlay] folder: private source/ and hidden/ (overlay.py)

    def gradebook(self):
        """nbgrader's gradebook of this course (a context manager)."""
        from nbgrader.api import Gradebook

        return Gradebook(self.db_url, self.course_id)


WORKERS_PER_CORE = 2   # the default; said by --workers' help and course.toml's checks


def default_workers(memory_gb: float | None = None) -> int:
    """Two grading workers per core: a worker and its student's kernel take turns, and both
    wait on the gradebook's disk writes, so one worker per core leaves the cores idle part
    of the time (figures: exercises/GRADING.md, from bench/grading_class.py); fewer where
    that many jobs of ``memory_gb`` would not fit in the machine's memory (at least one)."""
    n = WORKERS_PER_CORE * (os.cpu_count() or 1)
    if memory_gb:
        n = min(n, max(1, int(machine_memory_gb() // memory_gb)))
    return n


def machine_memory_gb() -> float:
    """The memory grading may use, in GB: the machine's, or this process's memory control
    group's limit where that is lower (a container)."""
    total = float("inf")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024 / 2**30
    except (OSError, ValueError, IndexError):
        pass
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers in ("memory", ""):
                base = "/sys/fs/cgroup/memory" if controllers else "/sys/fs/cgroup"
                name = "memory.limit_in_bytes" if controllers else "memory.max"
                raw = (Path(base + path) / name).read_text().strip()
                if raw.isdigit():
                    total = min(total, int(raw) / 2**30)
    except (OSError, ValueError):
        pass
    return total


# The least ``memory_gb`` a job needs: its kernel, its judge and the ranks a check starts
# share the job's control group, and each imports the framework. Measured by grading the
# sample answer of assignment 7 (the most processes: the kernel, the judge and 3 torch
# ranks or 2 Paddle ranks) at falling ``memory_gb``: 6/6 at 1.5 GB with either framework; at 1
# GB a torch rank was stopped at the limit and Paddle's test cell ran past its time limit
# (exercises/GRADING.md, "Memory and CPU per job").
MIN_MEMORY_GB = {"torch": 1.5, "paddle": 1.5}
RANKS = {"torch": 3, "paddle": 2}       # grader.checks.a7_ring_allreduce.WORLD


def min_memory_gb() -> tuple[float, str]:
    """``(GB, framework)``: the least ``memory_gb`` for the framework grading uses
    (``COURSE_FRAMEWORK``; the larger of both when it is not set)."""
    fw = os.environ.get("COURSE_FRAMEWORK")
    if fw in MIN_MEMORY_GB:
        return MIN_MEMORY_GB[fw], fw
    fw = max(MIN_MEMORY_GB, key=MIN_MEMORY_GB.__getitem__)
    return MIN_MEMORY_GB[fw], fw


def _section(raw: dict, name: str, cls: type, path: Path) -> Any:
    data = raw.get(name, {})
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown} in [{name}]; known: {sorted(known)}")
    values = {}
    for key, value in data.items():
        want = type(getattr(cls(), key))
        if want is tuple:
            value = tuple(value)
        elif want is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, want) or (isinstance(value, bool) and want is not bool):
            raise ValueError(f"{path}: [{name}] {key} = {value!r} should be a {want.__name__}")
        values[key] = value
    return cls(**values)


def load(course: str | Path) -> GradingConfig:
    course = Path(course).resolve()
    path = course / FILENAME
    raw: dict = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path} is not valid TOML: {e}") from None
    unknown = sorted(set(raw) - {"gradebook", "grading", "limits", "sandbox", "submission",
                                 "overlay"})
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {unknown}")
    book = raw.get("gradebook", {})
    unknown = sorted(set(book) - {"url", "course_id"})
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown} in [gradebook]; known: ['course_id', 'url']")
    url = str(book.get("url", "") or "")
    course_id = str(book.get("course_id", "") or DEFAULT_COURSE_ID)
    grading = raw.get("grading", {})
    unknown = sorted(set(grading) - {"workers"})
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown} in [grading]; known: ['workers']")
    workers = grading.get("workers", 0)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ValueError(f"{path}: [grading] workers = {workers!r} should be a whole number: "
                         "0 for two per core, or how many students are graded at once")
    limits = _section(raw, "limits", Limits, path)
    sandbox = _section(raw, "sandbox", SandboxConfig, path)
    submission = _section(raw, "submission", SubmissionLimits, path)
    from .overlay import folder_of

    cfg = GradingConfig(course=course, course_id=course_id,
                        db_url=url or "sqlite:///" + str(course / "gradebook.db"),
                        workers=workers or default_workers(limits.memory_gb), limits=limits, sandbox=sandbox,
                        submission=submission, overlay=folder_of(raw, path))
    problem = check(cfg)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return cfg


# the smallest uid a sandbox slot may have: below it are root and the system's own users
MIN_UID = 1000


def check(cfg: GradingConfig) -> str | None:
    """What is wrong with ``cfg``'s values (the first problem, in words), or None.

    Every limit is a positive number: a limit of 0 or below is a typo that would stop every
    kernel at once (``memory_gb = -1`` scored a correct notebook 0 as "crashed") or lift a
    bound. ``load`` calls it for ``course.toml``; ``grade_course`` again after the command
    line's overrides."""
    for section, values in (("limits", cfg.limits), ("submission", cfg.submission)):
        for f in fields(values):
            v = getattr(values, f.name)
            if not v > 0:
                return (f"[{section}] {f.name} = {v!r} should be more than 0 (see the "
                        f"comments in {FILENAME}: a limit of 0 or less would end or refuse "
                        "every submission)")
    if cfg.workers < 1:
        return f"workers = {cfg.workers!r} should be 1 or more (0 in {FILENAME}: two per core)"
    if cfg.sandbox.mode != "none":     # the limits a job's control group enforces
        need, fw = min_memory_gb()
        if cfg.limits.memory_gb < need:
            return (f"[limits] memory_gb = {cfg.limits.memory_gb:g} is below the {need:g} GB "
                    f"a job needs to import {fw} in its kernel, its judge and {RANKS[fw]} "
                    f"ranks (measured, exercises/GRADING.md): set it to {need:g} or more")
        have = machine_memory_gb()
        if cfg.workers * cfg.limits.memory_gb > have:
            fit = int(have // cfg.limits.memory_gb)
            return (f"workers x memory_gb = {cfg.workers} x {cfg.limits.memory_gb:g} GB is "
                    f"more than this machine's {have:.1f} GB of memory: set [grading] "
                    f"workers to {fit} or fewer (0: as many as fit, up to two per core), or "
                    "lower memory_gb")
    if cfg.sandbox.mode not in ("auto", "bwrap", "none"):
        return f'[sandbox] mode must be "auto", "bwrap" or "none", not {cfg.sandbox.mode!r}'
    if not MIN_UID <= cfg.sandbox.uid_base <= 2**31 - 2 * 10**5:
        return (f"[sandbox] uid_base = {cfg.sandbox.uid_base} should be between {MIN_UID} and "
                f"{2**31 - 2 * 10**5}: each worker slot's kernels run as uid_base + slot and "
                "its judge as uid_base + slot + 1000, never as root or a system user")
    if cfg.overlay is not None:
        from .overlay import problem

        why = problem(cfg)
        if why:
            return why
    return None


def with_overrides(cfg: GradingConfig, **values: Any) -> GradingConfig:
    """``cfg`` with the given limits / top-level fields replaced (``None`` values ignored)."""
    values = {k: v for k, v in values.items() if v is not None}
    lim = {k: values.pop(k) for k in list(values) if k in {f.name for f in fields(Limits)}}
    sub = {k: values.pop(k) for k in list(values) if k in {f.name for f in fields(SubmissionLimits)}}
    if sub:
        values["submission"] = replace(cfg.submission, **sub)
    if "sandbox_mode" in values:
        values["sandbox"] = replace(cfg.sandbox, mode=values.pop("sandbox_mode"))
    return replace(cfg, limits=replace(cfg.limits, **lim), **values)
