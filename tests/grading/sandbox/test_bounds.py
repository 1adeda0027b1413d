"""The control groups of grading (grader/grading/sandbox/bounds.py): a CPU share per job, and
the one rule that blames the machine for a kill or a time limit.

Real groups are made where this machine allows them (root, cgroup v1 or v2); the rule itself
is tested on made-up readings.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from grader.grading.sandbox import bounds
from grader.grading.sandbox.bounds import Box, CpuSample, cause, starved

BUSY = ["sh", "-c", "while :; do :; done"]


def _box(name: str, **kw) -> Box:
    box = Box.create(f"{name}-{os.getpid()}", 2**30, 64, **kw)
    if box is None:
        pytest.skip("this machine gives the grader no control group")
    return box


def _cpu_s(pid: int) -> float:
    """CPU time of process ``pid`` so far, from the kernel (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_job_that_starts_many_busy_processes_gets_no_more_cpu_than_the_job_beside_it():
    """Issue 32: a submission that starts many busy processes starved the honest one graded
    beside it (2/5 became 0/5). Every job's group has the same CPU weight, so eight busy
    processes of one job get, together, about what the other job's one gets. All are held
    on one core, so the comparison does not depend on how busy the machine's other cores
    are. Without the CPU controller (checked by making ``cpu=True`` do nothing) the honest
    process got 1/8 of the hog's time."""
    hog, honest = _box("test-hog", cpu=True), _box("test-honest", cpu=True)
    procs = []
    core = sorted(os.sched_getaffinity(0))[0]
    try:
        def into(box):
            def start():
                os.sched_setaffinity(0, {core})
                box.add(os.getpid())
            return start
        procs = [subprocess.Popen(BUSY, preexec_fn=into(hog)) for _ in range(8)]
        mine = subprocess.Popen(BUSY, preexec_fn=into(honest))
        procs.append(mine)
        time.sleep(2.0)
        hog_s = sum(_cpu_s(p.pid) for p in procs[:-1])
        honest_s = _cpu_s(mine.pid)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        hog.remove()
        honest.remove()
    assert hog_s > 0.1, "the busy processes did not run"
    assert honest_s >= 0.5 * hog_s, (honest_s, hog_s)


def test_a_jobs_kernel_and_judge_groups_are_made_below_its_group_and_share_its_limits(monkeypatch):
    """The worker's job group (JOB_ENV) holds the kernel's and the judge's groups: their
    memory together is bounded by one ``memory_gb`` (issue 32: a job could hold about twice
    ``memory_gb`` with its judge), and they share the job's one CPU share."""
    job = _box("test-job", cpu=True)
    try:
        monkeypatch.setenv(bounds.JOB_ENV, job.env()[bounds.JOB_ENV])
        assert Box.of_job().dirs == job.dirs
        kernel = Box.create("kernel", 2**30, 64)
        try:
            assert kernel is not None
            for c, d in kernel.dirs.items():
                assert d.parent == job.dirs[c], (c, d)
            sample = kernel.cpu_sample()
            if "cpuacct" in job.dirs or job.v2:
                assert sample is not None and sample[1] >= 0
        finally:
            kernel.remove()
    finally:
        job.remove()
    monkeypatch.setenv(bounds.JOB_ENV, '{"memory": "/etc"}')   # not a group: ignored
    assert Box.of_job() is None


class _Watch:
    over = None


class _Group:
    """A group with made-up readings: an out-of-memory kill counted in it, its own limit."""

    def __init__(self, killed: int, reached: bool) -> None:
        self.killed, self.reached = killed, reached

    def oom_killed(self) -> int:
        return self.killed

    def reached_limit(self) -> bool:
        return self.reached

    def hit_memory_limit(self) -> bool:
        return self.killed > 0 and self.reached


@pytest.mark.parametrize("signal_name, group, machine_kills, expected", [
    # issue 37: the machine-wide count rose (the student's own ranks at their limit, or
    # another job at its limit) and the kernel was killed: the student's crash, not the
    # machine's; the old rule said "machine-oom" and re-queued, then failed the job
    ("SIGKILL", _Group(0, False), 5, None),
    ("SIGKILL", None, 5, None),                       # no group: no evidence
    ("SIGKILL", _Group(1, True), 5, "memory"),        # its own limit
    ("SIGKILL", _Group(1, False), 0, bounds.MACHINE_OOM),   # killed by the machine's killer
    ("SIGSEGV", _Group(1, False), 5, None),
])
def test_only_the_groups_own_accounting_blames_the_machine_for_a_kill(monkeypatch, signal_name,
                                                                      group, machine_kills,
                                                                      expected):
    monkeypatch.setattr(bounds, "machine_oom_kills", lambda: 10 + machine_kills)
    end = {"signal": signal_name, "exit_code": None}
    assert cause(end, _Watch(), group, 10) == expected


def test_an_out_of_memory_kill_in_a_group_at_its_own_limit_is_the_limit_not_the_machine():
    """A real group: a process that takes more than the group's limit is killed by the
    group's own killer, and the launcher's rule names the limit (never the machine)."""
    box = Box.create(f"test-oom-{os.getpid()}", 64 * 2**20, 64)
    if box is None:
        pytest.skip("this machine gives the grader no control group")
    try:
        p = subprocess.run(["python3", "-c", "x = bytearray(256 * 2**20)"],
                           preexec_fn=lambda: box.add(os.getpid()))
        assert p.returncode == -9
        end = {"signal": "SIGKILL", "exit_code": None}
        assert box.oom_killed() >= 1 and box.reached_limit()
        assert cause(end, _Watch(), box) == "memory"
    finally:
        box.remove()


@pytest.mark.parametrize("used_s, waited_s, fair, expected", [
    (0.1, 8.0, 1.0, True),     # waited for a CPU most of the time, got little: starved
    (0.1, 0.0, 1.0, False),    # slept (a lock, a barrier): its own doing
    (9.0, 30.0, 1.0, False),   # many busy processes of its own: its whole share, waiting for each other
    (3.0, 8.0, 0.5, False),    # half a core is its share with 4 workers on 2 cores: it got it
    (1.0, 8.0, 0.5, True),
])
def test_a_time_limit_is_the_machines_fault_only_when_the_group_waited_below_its_share(
        used_s, waited_s, fair, expected):
    before = CpuSample(100.0, 0, 0)
    after = CpuSample(110.0, int(used_s * 1e9), int(waited_s * 1e9))
    assert starved(before, after, fair) is expected
    assert starved(None, after, fair) is False     # no accounting: no evidence


@pytest.mark.slow   # one sandboxed kernel that imports torch and paddle: about 15 s
@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_a_kernel_at_one_gb_imports_the_framework_bounded_by_its_group_not_its_address_space(
        tmp_path, framework):
    """Issue 37: with ``memory_gb = 1`` the address-space limit stopped ``import torch`` and
    ``import paddle`` (what a process maps, not what it holds), a correct answer scored 0 and
    the feedback blamed an ImportError. Where the machine gives control groups, the kernel
    runs without RLIMIT_AS (its group bounds it) and imports both; past the group's limit it
    is still stopped, and its end names the memory limit."""
    from grader.grading.config import Limits
    from grader.grading.sandbox import setup
    from tests.grading.sandbox.test_setup import CFG, Kernel, _wait_end

    if setup.check(CFG):
        pytest.skip(setup.check(CFG))
    if not bounds.memory_groups():
        pytest.skip("this machine gives the grader no memory control group")
    limits = Limits(memory_gb=1.0, cpu_seconds=120, processes=64)
    work = tmp_path / "w"
    work.mkdir()
    k = Kernel(work, tmp_path / "rt", limits, host_env={"OMP_NUM_THREADS": "1"})
    try:
        out, err = k.run(f"import resource, {framework}\n"
                         f"print(resource.getrlimit(resource.RLIMIT_AS)[0], "
                         f"float({framework}.ones([3]).sum()))", timeout=120)
        assert err == "" and out.endswith(f"{resource_unlimited()} 3.0\n"), (out, err)
        from nbclient.exceptions import DeadKernelError
        with pytest.raises(DeadKernelError):   # 1.5 GB held: the group's limit stops it
            k.run("x = bytearray(1536 * 2**20)\nx[::4096] = b'1' * len(x[::4096])", timeout=60)
    finally:
        k.close()
    end = _wait_end(tmp_path / "rt")
    assert end == "memory-limit", end
    assert "memory limit (1 GB" in setup.describe_limit_hit(end, limits)


def resource_unlimited() -> int:
    import resource
    return resource.RLIM_INFINITY


def test_another_groups_out_of_memory_kill_does_not_make_a_kill_look_like_the_machines():
    """Issue 37, on real groups: a process in one group goes past that group's limit (its
    own killer ends it, and the machine-wide count rises), while in another group a process
    is killed by a SIGKILL of its own. The old rule (SIGKILL and the machine-wide count up)
    called the second "machine-oom": re-queued, then recorded as not graded."""
    other = Box.create(f"test-other-{os.getpid()}", 64 * 2**20, 64)
    mine = Box.create(f"test-mine-{os.getpid()}", 2**30, 64)
    if other is None or mine is None:
        pytest.skip("this machine gives the grader no control group")
    try:
        before = bounds.machine_oom_kills()
        p = subprocess.run(["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                           preexec_fn=lambda: mine.add(os.getpid()))
        q = subprocess.run(["python3", "-c", "x = bytearray(256 * 2**20)"],
                           preexec_fn=lambda: other.add(os.getpid()))
        assert (p.returncode, q.returncode) == (-9, -9)
        assert bounds.machine_oom_kills() > before    # what the old rule read
        end = {"signal": "SIGKILL", "exit_code": None}
        assert cause(end, _Watch(), mine, before) is None           # the student's crash
        assert cause(end, _Watch(), other, before) == "memory"       # the other's own limit
    finally:
        other.remove()
        mine.remove()


class _Km:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def interrupt_kernel(self):
        self.calls.append("interrupt")

    async def shutdown_kernel(self, now=False):
        self.calls.append("shutdown")


class _Job:
    def __init__(self, after: CpuSample) -> None:
        self.after = after

    def cpu_sample(self):
        return self.after


@pytest.mark.parametrize("waited_s, retried", [(8.0, True), (0.0, False)])
def test_a_cell_past_its_time_limit_while_its_job_was_starved_ends_the_attempt_as_a_fault(
        tmp_path, waited_s, retried):
    """Issue 32: a job that timed out while others held the CPU is graded again, not scored
    0. The executor asks the rule when a cell's limit runs out: starved, it stops the kernel
    and marks the trace (item.py then raises GradingFault with MACHINE_FAULTS' reason);
    otherwise the cell is interrupted and scored as before."""
    import asyncio

    from nbclient.exceptions import DeadKernelError

    from grader.grading.run.item import MACHINE_FAULTS
    from grader.grading.sandbox import crashes

    trace = tmp_path / "cell"
    trace.write_text("3\tcell 4")
    ex = crashes.GuardedExecute(trace_file=str(trace), starved_retry=True, fair_cores=1.0,
                                interrupt_on_timeout=True)
    ex.km = _Km()
    ex._job = _Job(CpuSample(110.0, int(0.1e9), int(waited_s * 1e9)))
    ex._cpu0 = CpuSample(100.0, 0, 0)
    if retried:
        with pytest.raises(DeadKernelError, match="other work held the CPU"):
            asyncio.run(ex._async_handle_timeout(10, None))
        assert ex.km.calls == ["shutdown"]
        assert crashes.dead_cause(trace) == bounds.STARVED and bounds.STARVED in MACHINE_FAULTS
    else:
        asyncio.run(ex._async_handle_timeout(10, None))
        assert ex.km.calls == ["interrupt"] and crashes.dead_cause(trace) is None


def test_a_kill_at_the_jobs_limit_is_the_limit_in_every_group_inside_it(monkeypatch):
    """A rank's group is inside its judge's and its job's (and knows neither by name): a
    process that fills the job's limit, far below its own group's, is killed by the job's
    killer, and the rule names the memory limit, not the machine (its own group did not
    reach its limit, so reading the group alone said "machine-oom")."""
    monkeypatch.delenv(bounds.JOB_ENV, raising=False)
    job = Box.create(f"course-test-job-{os.getpid()}", 96 * 2**20, None, cpu=True)
    if job is None:
        pytest.skip("this machine gives the grader no control group")
    try:
        monkeypatch.setenv(bounds.JOB_ENV, job.env()[bounds.JOB_ENV])
        rank = Box.create("rank", 2**30, 64)
        monkeypatch.delenv(bounds.JOB_ENV)
        try:
            p = subprocess.run(["python3", "-c", "x = bytearray(256 * 2**20)"],
                               preexec_fn=lambda: rank.add(os.getpid()))
            assert p.returncode == -9
            end = {"signal": "SIGKILL", "exit_code": None}
            assert rank.oom_killed() >= 1 and not rank.reached_limit()
            assert cause(end, _Watch(), rank) == "memory"
        finally:
            rank.remove()
    finally:
        job.remove()
