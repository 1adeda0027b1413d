"""How much memory one call of a student's function takes, measured where the student's code
cannot reach the measurement.

An exercise that teaches a method for memory (a11's ring attention: never the whole score
matrix at once) is graded on the memory a call takes, not only on its output. Where the
student's code runs decides who can measure it:

- **Graded through the judge, in the sandbox** (the function is a
  :class:`~grader.grading.judge.proxies.KernelObject`: it runs in the student's kernel). The
  launcher puts the kernel in a control group of its own (``course-grading-*``, inside the
  job's group: :mod:`grader.grading.sandbox.bounds`); every process and thread the kernel
  starts is in it, and its files are root's. The judge opens that group's peak counter
  (cgroup v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``) for writing while it is still
  root (:func:`open_kernel_group`, from ``process._confine``, before ``confine.drop``), and
  keeps the descriptor: around each measured call it resets the peak to what the group holds
  now, calls, and reads the peak. What the kernel's code does cannot lower that reading: it
  cannot write the counter, nor leave the group, and a child process it starts is counted
  too. (On v2 the reset is per descriptor, Linux 6.12 or later; an older v2 kernel cannot
  reset it, and the reading is then "not measured".) The descriptor is the one thing of the
  kernel's group the judge can write, and all it does is reset that peak: on v2 for this
  descriptor's reads only; on v1 for everyone, where the launcher's verdict on a memory kill
  (:meth:`~grader.grading.sandbox.bounds.Box.reached_limit`) also reads the failure count.
- **In this process** (a plain callable: a student's own notebook, the course's tests): this
  process's peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs``). The
  student's code runs in the measuring process, so it could change the reading; nothing is
  graded for credit this way (self-study and the tests, where the answers are the course's).
  What the measuring code itself allocates during the call shares the heap with the
  student's: a check's merge records, between a ring's freed blocks, made an honest ring's
  first call in a process read 81 MB instead of 19; a check that measures here does its own
  work during the call in a thread of its own (glibc gives each thread its own heap).
- **Anywhere else** (judged without a sandbox or without a memory control group): not
  measured; :class:`Reading` says so and the check decides (a11 pays on the rest and says
  that memory was not measured).

What is measured is what the call adds: the group's (or process's) peak during the call above
what it held when the call began. Memory the notebook held before the call is not the call's.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = ["Reading", "peak_of", "in_kernel", "open_kernel_group", "KernelGroup",
           "KERNEL_GROUP_PREFIX"]

KERNEL_GROUP_PREFIX = "course-grading-"     # the launcher's name for a kernel's group


@dataclass
class Reading:
    """What a measured call added at its peak, in bytes (``None``: not measured), and how it
    was measured (a few words for the feedback)."""

    bytes: int | None = None
    how: str = ""


class KernelGroup:
    """Descriptors on the peak and the current usage of the kernel's control group, opened
    while this process could write them (see the module docstring)."""

    def __init__(self, peak_fd: int, current_fd: int, v2: bool, path: str) -> None:
        self.peak_fd, self.current_fd, self.v2, self.path = peak_fd, current_fd, v2, path

    @staticmethod
    def _read(fd: int) -> int:
        return int(os.pread(fd, 64, 0).split()[0])

    def start(self) -> int:
        """Reset the peak to the current usage; the usage then (bytes)."""
        os.lseek(self.peak_fd, 0, os.SEEK_SET)
        os.write(self.peak_fd, b"reset\n" if self.v2 else b"0\n")
        return self._read(self.current_fd)

    def peak(self) -> int:
        return self._read(self.peak_fd)


_KERNEL: KernelGroup | None = None


def open_kernel_group() -> KernelGroup | None:
    """Open the control group of the kernel this judge serves (the one ``course-grading-*``
    group with processes in the job's group, :data:`grader.grading.sandbox.bounds.JOB_ENV`)
    for measuring; kept for this process's life. ``None`` (and nothing kept) where there is
    no such group or it cannot be opened for writing (not root, no memory controller)."""
    global _KERNEL
    from ..sandbox import bounds

    try:
        job = bounds.Box.of_job()
    except (OSError, ValueError):
        return None
    if job is None:
        return None
    folder = job.dirs.get("" if job.v2 else "memory")
    if folder is None:
        return None
    try:
        found = [p for p in folder.iterdir() if p.name.startswith(KERNEL_GROUP_PREFIX)
                 and p.is_dir() and (p / "cgroup.procs").read_text().split()]
    except OSError:
        return None
    if len(found) != 1:
        return None
    group = found[0]
    names = ("memory.peak", "memory.current") if job.v2 else \
        ("memory.max_usage_in_bytes", "memory.usage_in_bytes")
    try:
        peak_fd = os.open(group / names[0], os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        current_fd = os.open(group / names[1], os.O_RDONLY | os.O_CLOEXEC)
        meter = KernelGroup(peak_fd, current_fd, job.v2, str(group))
        meter.start()             # v2 before Linux 6.12: the peak cannot be reset
    except (OSError, ValueError):
        os.close(peak_fd)
        return None
    _KERNEL = meter
    return meter


_STATUS = re.compile(rb"^(VmRSS|VmHWM):\s+(\d+) kB", re.M)


def _self_status() -> dict[bytes, int]:
    with open("/proc/self/status", "rb") as f:
        return {k: int(v) * 1024 for k, v in _STATUS.findall(f.read())}


def _self_start() -> int | None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                  # VmHWM := VmRSS (Linux 4.0 and later)
        return _self_status()[b"VmRSS"]
    except (OSError, KeyError):
        return None


def in_kernel(fn: Callable) -> bool:
    """Whether ``fn`` runs in the student's kernel (a judge's handle on a kernel function)."""
    from .proxies import KernelObject

    return isinstance(fn, KernelObject)


@contextlib.contextmanager
def peak_of(fn: Callable) -> Iterator[Reading]:
    """Measure what calling ``fn`` inside the ``with`` block adds at its peak; the
    :class:`Reading` is filled in when the block ends (also when it raises)."""
    reading = Reading()
    if in_kernel(fn):
        meter = _KERNEL
        try:
            start = meter.start() if meter is not None else None
        except (OSError, ValueError):
            start = None
        try:
            yield reading
        finally:
            if meter is not None and start is not None:
                try:
                    reading.bytes = max(0, meter.peak() - start)
                    reading.how = "the kernel's control group, read by the judge"
                except (OSError, ValueError):
                    pass
            if reading.bytes is None:
                reading.how = "not measured: this grading machine gives the kernel no " \
                              "memory control group"
        return
    start = _self_start()
    try:
        yield reading
    finally:
        if start is not None:
            try:
                reading.bytes = max(0, _self_status()[b"VmHWM"] - start)
                reading.how = "this process's peak resident memory"
            except (OSError, KeyError):
                pass
        if reading.bytes is None:
            reading.how = "not measured: /proc/self/clear_refs is not available here"
