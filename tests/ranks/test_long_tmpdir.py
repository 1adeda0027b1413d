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
