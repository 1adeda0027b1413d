"""The capstone's Paddle script, launched as the page launches it (python -m
paddle.distributed.launch, 4 gloo CPU ranks): every replicate x tensor layout's loss
lies on the one-process loss within the page's tolerance, the control (gradients
averaged twice) does not, and the sharding the page says Paddle's CPU build cannot run
indeed does not run."""
from __future__ import annotations

import json
import sys

import pytest

from grader.lab import capstone

from ._run import SCRIPTS, run

pytestmark = pytest.mark.slow
PAGE_LAYOUTS = ["4x1x1x1", "2x1x2x1", "1x1x4x1"]      # as the page runs them


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("capstone_paddle")
    run([sys.executable, "-m", "paddle.distributed.launch", "--log_level", "ERROR",
         "--nproc_per_node", "4", "--log_dir", str(tmp / "log"),
         str(SCRIPTS / "capstone_paddle.py"), "--layouts", *PAGE_LAYOUTS, "--control",
         "4x1x1x1", "--try-sharding", "--views", "4x1x1x1", "--out",
         str(tmp / "out.json")], tmp, timeout=400,
        logs=(tmp / "log" / "workerlog.0",), PYTHONWARNINGS="ignore")
    return json.loads((tmp / "out.json").read_text())


def test_every_layout_lies_on_the_one_process_loss_and_the_control_leaves_it(four):
    rows = capstone.parity(four)
    assert [(r.layout, r.control) for r in rows] == \
        [(t, False) for t in PAGE_LAYOUTS] + [("4x1x1x1", True)]
    for r in rows:
        assert r.within != r.control, r
    assert four["reference"][0] - four["reference"][-1] > 100 * capstone.TOLERANCE


def test_the_batch_as_views_drifts_from_the_first_step_as_the_page_shows(four):
    """The page's drift: the same layout, its batch passed to dist.shard_tensor as
    slices of one tensor, leaves the one-process loss before any update (if Paddle
    stops doing this, the page's paragraph must change)."""
    ((layout, first, worst),) = capstone.drifts(four)
    assert layout == "4x1x1x1" and first > 100 * capstone.TOLERANCE and worst >= first


def test_sharding_does_not_run_on_cpu_ranks_as_the_page_says(four):
    (note,) = four["notes"]
    assert note.startswith("sharding_level 1: ") and "ran" not in note.split(": ", 1)[1]
