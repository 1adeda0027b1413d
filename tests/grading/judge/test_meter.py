"""What a student's call adds to memory at its peak (grader/grading/judge/meter.py): in this
process, and in the kernel's control group as the judge reads it (a real group where this
machine allows one: root, a memory controller)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from grader.grading.judge import meter
from grader.grading.sandbox import bounds
from grader.grading.sandbox.bounds import Box

MB = 2**20
# a child standing for the kernel: each line read, it touches that many MB, frees, answers
CHILD = ("import sys, numpy as np\n"
         "for line in sys.stdin:\n"
         "    a = np.ones(int(line) * 2**20, np.uint8); del a\n"
         "    print('done', flush=True)\n")


def test_a_call_in_this_process_is_measured_by_its_peak_not_by_what_it_keeps():
    def holds(mb):
        a = np.ones(mb * MB, np.uint8)      # touched, then freed when the call returns
        return int(a.sum())

    with meter.peak_of(holds) as big:
        holds(64)
    with meter.peak_of(holds) as small:
        holds(0)
    assert big.bytes is not None and big.bytes >= 60 * MB, big
    assert small.bytes < 16 * MB, small


def test_the_judge_reads_the_kernels_group_a_child_process_included(monkeypatch):
    """The kernel's group is found in the job's group, opened while the judge may write it,
    and reset around each call: what the kernel's child process touched during the call is
    in the reading, what it did before is not."""
    monkeypatch.delenv(bounds.JOB_ENV, raising=False)
    job = Box.create(f"course-test-job-{os.getpid()}", 2**30, None)
    if job is None:
        pytest.skip("this machine gives the grader no control group")
    child = None
    monkeypatch.setattr(meter, "_KERNEL", None)
    try:
        monkeypatch.setenv(bounds.JOB_ENV, job.env()[bounds.JOB_ENV])
        kernel = Box.create(f"{meter.KERNEL_GROUP_PREFIX}test-{os.getpid()}", 2**30, 64)
        assert kernel is not None
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: kernel.add(os.getpid()))

        def run(mb):
            child.stdin.write(f"{mb}\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"

        run(96)                             # before the measured calls: not theirs
        assert meter.open_kernel_group() is not None
        monkeypatch.setattr(meter, "in_kernel", lambda fn: True)
        with meter.peak_of(run) as big:
            run(64)
        with meter.peak_of(run) as small:
            run(0)
        assert big.how.startswith("the kernel's control group"), big
        assert 60 * MB <= big.bytes < 96 * MB, big
        assert small.bytes < 16 * MB, small
    finally:
        if child is not None:
            child.kill()
            child.wait()
        if meter._KERNEL is not None:
            os.close(meter._KERNEL.peak_fd)
            os.close(meter._KERNEL.current_fd)
        monkeypatch.delenv(bounds.JOB_ENV)
        for name in list(job.dirs.values()):
            for sub in name.glob(f"{meter.KERNEL_GROUP_PREFIX}*"):
                Box({c: d / sub.name for c, d in job.dirs.items()}, job.v2).remove()
        job.remove()


def test_a_kernel_function_without_a_group_is_not_measured(monkeypatch):
    monkeypatch.setattr(meter, "_KERNEL", None)
    monkeypatch.setattr(meter, "in_kernel", lambda fn: True)
    with meter.peak_of(print) as r:
        pass
    assert r.bytes is None and r.how.startswith("not measured"), r
