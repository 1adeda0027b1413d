"""Ranks under a TMPDIR of ~120 characters (a cluster's per-job scratch folder): each rank's
socket is in a folder below it, past the 107 bytes a socket address holds. Before
:mod:`grader.unixsock`, every rank failed ("AF_UNIX path too long") and an honest a7/a10
answer scored 0; now the ranks run and are counted as anywhere else."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from grader.ranks import relay

pytestmark = pytest.mark.slow


def test_ranks_run_and_are_counted_whatever_the_length_of_tmpdir(tmp_path, monkeypatch):
    long = tmp_path / ("scratch-" + "j" * max(10, 120 - len(str(tmp_path)) - 9))
    long.mkdir()
    assert len(str(long)) >= 118
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)     # read TMPDIR again
    monkeypatch.delenv(relay.JOB_TMP, raising=False)
    src = ("import torch.distributed as dist\n"
           "def fn(x, rank, world_size):\n"
           "    dist.all_reduce(x)\n"
           "    return x\n")
    logs = relay.run_ranks({"module": "long_tmpdir_fn", "name": "fn", "source": src},
                           [np.full(3, r + 1, np.float32) for r in range(2)], timeout=60)
    for log in logs:
        assert "error" not in log, log["error"]
        assert log["got"].tolist() == [3.0] * 3 and len(log["collectives"]) == 1
    assert os.listdir(long) == []        # the ranks' folders are gone


def test_sandboxed_ranks_run_whatever_the_length_of_tmpdir(tmp_path, monkeypatch):
    """The same, each rank in its sandbox (root and bubblewrap; skipped without them): the
    rank binds its socket inside the sandbox, the relay reaches it from outside."""
    from grader.grading.config import Limits, SandboxConfig
    from grader.grading.sandbox import rank, setup
    from tests.checks.notebooks import reference
    from tests.grading.sandbox.test_rank import _grade

    cfg = SandboxConfig(uid_base=64000)
    problem = setup.check(cfg)
    if problem:
        pytest.skip(problem)
    runtime = tmp_path / "rt"          # (the kernel's own sockets: a short folder)
    runtime.mkdir()
    setup.prepare(Limits(processes=256), cfg, os.getpid() % 500, runtime)
    long = tmp_path / ("scratch-" + "j" * max(10, 120 - len(str(tmp_path)) - 9))
    long.mkdir()
    long.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv(relay.JOB_TMP, raising=False)
    for k, v in rank.isolation(str(runtime / "sandbox.json")).items():
        monkeypatch.setenv(k, v)
    results = _grade(reference("a7_ring_allreduce")["ring_all_reduce"])
    assert [r.points for r in results] == [3, 1, 2], [r.text() for r in results]
