"""The capstone's Paddle script off one machine: two launchers as two "nodes" on this one
(``--nnodes 2 --master``) train to the same losses as one node of the same layout, bit
for bit; its Slurm batch script runs under a real one-node Slurm; and a wrong master
address, a node that never joins and a node that dies each end the run within the
script's join time-out (lowered here), saying which node and why, never a hang. Paddle's
launcher itself waits for its peers without end: the batch script's own watch gives up."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time

import pytest

from grader.lab import capstone
from grader.lab.capstone.records import RECORDS

from ._nodes import (one_node_srun, same_losses_as_one_node, start_node, stop_all,
                     wait_for)
from ._run import BIN, SCRIPTS, free_port, run
from ._slurm import GPUS, slurm  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow
LAUNCH = [sys.executable, "-m", "paddle.distributed.launch"]
SCRIPT = "capstone_paddle.py"
SBATCH = "capstone_paddle.sbatch"
LAYOUT = "2x1x1x1"          # two ranks, replicas of each other: one per node below
JOIN_TIMEOUT = 10           # seconds, for the tests (the script's default: 300)
RECORD = RECORDS / "paddle_two_nodes.json"   # what the scale page shows
UNREACHABLE = "192.0.2.1"   # TEST-NET-1 (RFC 5737): no machine answers there
QUIET = {"PYTHONWARNINGS": "ignore"}


def one_node_of(gpus: int) -> list[str]:
    """sbatch's options that override the script's node, GPU and core counts: one node
    of this machine (a job asking for more cores than a node has pends for ever)."""
    return ["--nodes=1", f"--gpus-per-node={gpus}", f"--cpus-per-task={os.cpu_count()}"]


@pytest.fixture
def work(tmp_path):
    """The folder a job is submitted from: the script and its batch file (the launcher
    writes its logs there)."""
    work = tmp_path / "submit"
    work.mkdir()
    for name in (SCRIPT, SBATCH):
        shutil.copy(SCRIPTS / name, work / name)
    return work


def two_node_cmd(node: int, master: str, *args: str) -> list[str]:
    return LAUNCH + ["--nnodes", "2", "--nproc_per_node", "1", "--master", master,
                     "--log_dir", f"log/node{node}", SCRIPT, *args]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> dict:
    """The reference: the same layout on one node of two ranks."""
    tmp = tmp_path_factory.mktemp("one_node")
    run(LAUNCH + ["--log_level", "ERROR", "--nproc_per_node", "2", "--log_dir",
                  str(tmp / "log"), str(SCRIPTS / SCRIPT), "--layouts", LAYOUT, "--out",
                  str(tmp / "out.json")], tmp, logs=(tmp / "log" / "workerlog.0",), **QUIET)
    return json.loads((tmp / "out.json").read_text())


def test_two_nodes_train_to_the_one_node_losses_bit_for_bit(work, one_node):
    master = f"127.0.0.1:{free_port()}"
    nodes = [start_node(f"node{n}", two_node_cmd(n, master, "--layouts", LAYOUT, "--out",
                                                  "out.json"), work, work.parent, **QUIET)
             for n in (0, 1)]
    same_losses_as_one_node(nodes, work / "out.json", one_node, LAYOUT, RECORD,
                            SCRIPTS / "capstone_paddle.py",
                            "two launchers (--nnodes 2 --master) of 1 rank, and one launcher of 2 ranks: capstone_paddle.py --layouts 2x1x1x1")


def test_the_batch_script_trains_under_a_real_slurm(work, slurm):
    """sbatch as a reader submits it, one node and its two GPUs on the command line:
    one launcher, two ranks, the layout the script derives (1 replica x 2-way tensor
    parallel), on the one-process curve, logs in the node's own folder."""
    job = slurm.sbatch(work / SBATCH, work, one_node_of(GPUS),
                       MASTER_PORT=str(free_port()), OUT=str(work / "out.json"), **QUIET)
    logs = sorted((work / "log" / job.id / "0").glob("workerlog.*"))
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), (
        job.output[-3000:] + "".join(f.read_text()[-2000:] for f in logs) + slurm.logs())
    assert [f.name for f in logs] == ["workerlog.0", "workerlog.1"]
    result = json.loads((work / "out.json").read_text())
    (row,) = capstone.parity(result)
    assert (row.layout, result["world"]) == ("1x1x2x1", 2) and row.within, row


def first_of_two_nodes(work, **extra: str):
    """The batch script run as on a two-node allocation whose second node never starts
    its task (a stand-in srun starts node 0 alone; a one-node Slurm cannot show this:
    the launcher of a one-node job never asks its master for peers)."""
    fake = one_node_srun(work.parent)
    return start_node("node0", ["bash", SBATCH], work, work.parent,
                      PATH=f"{fake}:{BIN}:/usr/bin:/bin", SLURM_NNODES="2",
                      SLURM_JOB_NODELIST="node[1-2]", SLURM_GPUS_ON_NODE="1",
                      SLURM_JOB_ID="4242", JOIN_TIMEOUT=str(JOIN_TIMEOUT),
                      OUT=str(work / "out.json"), **QUIET, **extra)


def watch_says(why: str) -> str:
    """The pattern of the watch's line for node 0 of 2, giving up for ``why``."""
    return (rf"node {re.escape(socket.gethostname())} \(0 of 2\): its ranks did not start "
            rf"within the join time-out of {JOIN_TIMEOUT} s: it {why}")


def test_a_wrong_master_address_ends_the_node_after_the_join_timeout_naming_it(work):
    port = free_port()
    node = first_of_two_nodes(work, RDZV_HOST=UNREACHABLE, MASTER_PORT=str(port))
    took = node.wait(timeout=JOIN_TIMEOUT + 90)
    assert node.proc.returncode == 1, node.output()[-3000:]
    assert re.search(watch_says("could not reach the master at "
                                + re.escape(f"{UNREACHABLE}:{port}")),
                     node.output()), node.output()[-3000:]
    assert JOIN_TIMEOUT <= took < JOIN_TIMEOUT + 60, took
    assert not (work / "out.json").exists()


def test_a_node_that_never_joins_ends_the_others_after_the_join_timeout(work):
    """Node 0 reaches its own master and waits; the watch stops it after JOIN_TIMEOUT
    seconds, saying so (Paddle's master does not know which node is missing)."""
    node = first_of_two_nodes(work, MASTER_PORT=str(free_port()))
    took = node.wait(timeout=JOIN_TIMEOUT + 90)
    assert node.proc.returncode == 1, node.output()[-3000:]
    assert re.search(watch_says(r"reached the master at 127\.0\.0\.1:\d+, but not "
                                      "all 2 nodes joined"), node.output()), \
        node.output()[-3000:]
    assert JOIN_TIMEOUT <= took < JOIN_TIMEOUT + 60, took
    assert not (work / "out.json").exists()


def test_a_node_that_dies_mid_training_ends_the_other_naming_its_address_and_the_cause(
        work):
    """Two nodes train (many layouts in a row); once rank 0 has printed its first
    layout, the other node dies, every process of it at once. The survivor's rank reads
    from the dead node's address in its next collective, gloo names that address and the
    reset connection, the rank aborts and the launcher ends, far sooner than any
    time-out."""
    master = f"127.0.0.1:{free_port()}"
    args = ["--layouts", *[LAYOUT] * 12]
    nodes = [start_node(f"node{n}", two_node_cmd(n, master, *args), work, work.parent,
                        **QUIET) for n in (0, 1)]
    try:
        survivor = wait_for(nodes, f"{LAYOUT}: loss", timeout=200)   # holds rank 0
        victim = next(n for n in nodes if n is not survivor)
        victim.die()
        killed = time.monotonic()
        survivor.wait(timeout=120)
        took = time.monotonic() - killed
    finally:
        stop_all(nodes)
    out = survivor.output()
    assert survivor.proc.returncode != 0
    assert out.count(f"{LAYOUT}: loss") < 12, "the run ended before the node died"
    # gloo words it either way round: "Read error [127.0.0.1]:N: Connection reset by peer"
    # or "Connection closed by peer [127.0.0.1]:N" (both seen)
    assert re.search(r"\[127\.0\.0\.1\]:\d+: Connection (reset|closed) by peer"
                     r"|Connection (reset|closed) by peer \[127\.0\.0\.1\]:\d+", out), \
        out[-4000:]
    assert took < JOIN_TIMEOUT + 30, took
