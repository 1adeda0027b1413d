"""The capstone's PyTorch script off one machine: two torchrun "nodes" on this one (c10d
rendezvous, ``--nnodes 2``) train to the same losses as one node of the same layout, bit
for bit; its Slurm batch script runs under a real one-node Slurm; and a wrong rendezvous
address, a node that never joins and a node that dies each end the run within the
script's time-outs (lowered here), saying which node and why, never a hang."""
from __future__ import annotations

import json
import os
import re
import socket
import time

import pytest

from grader.lab import capstone
from grader.lab.capstone.records import RECORDS

from ._nodes import (one_node_srun, same_losses_as_one_node, start_node, stop_all,
                     wait_for)
from ._run import BIN, SCRIPTS, free_port, run
from ._slurm import GPUS, slurm  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow
TORCHRUN = str(BIN / "torchrun")
SCRIPT = str(SCRIPTS / "capstone_torch.py")
SBATCH = SCRIPTS / "capstone_torch.sbatch"
LAYOUT = "2x1x1x1"          # two ranks, replicas of each other: one per node below
JOIN_TIMEOUT = 8            # seconds, for the tests (the script's default: 300)
READ_TIMEOUT = 4
RECORD = RECORDS / "torch_two_nodes.json"   # what the scale page shows
UNREACHABLE = "192.0.2.1"   # TEST-NET-1 (RFC 5737): no machine answers there


def one_node_of(gpus: int) -> list[str]:
    """sbatch's options that override the script's node, GPU and core counts: one node
    of this machine (a job asking for more cores than a node has pends for ever)."""
    return ["--nodes=1", f"--gpus-per-node={gpus}", f"--cpus-per-task={os.cpu_count()}"]


def two_node_cmd(node: int, port: int, *args: str) -> list[str]:
    """One node's command, as the page shows it (the node rank is ignored by the c10d
    rendezvous, which numbers the nodes as they arrive; torchrun says so)."""
    return [TORCHRUN, "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=capstone",
            f"--rdzv-conf=join_timeout={JOIN_TIMEOUT}", SCRIPT, *args]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> dict:
    """The reference: the same layout on one node of two ranks."""
    tmp = tmp_path_factory.mktemp("one_node")
    run([TORCHRUN, "--standalone", "--nproc-per-node=2", SCRIPT, "--layouts", LAYOUT,
         "--out", "out.json"], tmp)
    return json.loads((tmp / "out.json").read_text())


def test_two_nodes_train_to_the_one_node_losses_bit_for_bit(tmp_path, one_node):
    port = free_port()
    nodes = [start_node(f"node{n}", two_node_cmd(n, port, "--layouts", LAYOUT, "--out",
                                                  str(tmp_path / "out.json")), tmp_path,
                        tmp_path) for n in (0, 1)]
    same_losses_as_one_node(nodes, tmp_path / "out.json", one_node, LAYOUT, RECORD,
                            SCRIPTS / "capstone_torch.py",
                            "two torchrun nodes (--nnodes=2, c10d) of 1 rank, and torchrun --standalone --nproc-per-node=2: capstone_torch.py --layouts 2x1x1x1")


def test_the_batch_script_trains_under_a_real_slurm(tmp_path, slurm):
    """sbatch as a reader submits it, one node and its two GPUs on the command line:
    one torchrun, two ranks, the layout the script derives (1 replica x 2-way tensor
    parallel), on the one-process curve; state and exit code are Slurm's."""
    out = tmp_path / "out.json"
    job = slurm.sbatch(SBATCH, SCRIPTS, one_node_of(GPUS), RDZV_PORT=str(free_port()), OUT=str(out))
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output[-4000:] + slurm.logs()
    result = json.loads(out.read_text())
    (row,) = capstone.parity(result)
    assert (row.layout, result["world"]) == ("1x1x2x1", 2) and row.within, row
    assert re.search(r"^0: 1x1x2x1: loss", job.output, re.M), job.output[-3000:]  # --label


def test_a_job_asking_more_than_the_node_has_fails_at_once_saying_so(slurm):
    """The script's own 32 cores per task on this node pend for ever; the test Slurm
    says why at once instead of waiting out the job's time limit."""
    start = time.monotonic()
    with pytest.raises(AssertionError, match="cannot start here: PartitionConfig"):
        slurm.sbatch(SBATCH, SCRIPTS, ["--nodes=1", "--gpus-per-node=1"])
    assert time.monotonic() - start < 30


def test_a_wrong_rendezvous_address_ends_the_job_naming_the_node_and_the_address(
        tmp_path, slurm):
    """The rendezvous host given wrong (RDZV_HOST): the node cannot reach the store and
    gives up after READ_TIMEOUT; srun names the node, torchrun the address."""
    port = free_port()
    start = time.monotonic()
    job = slurm.sbatch(SBATCH, SCRIPTS, one_node_of(1),
                       RDZV_HOST=UNREACHABLE, RDZV_PORT=str(port),
                       READ_TIMEOUT=str(READ_TIMEOUT), OUT=str(tmp_path / "out.json"))
    took = time.monotonic() - start
    assert job.state == "FAILED" and job.exit_code == "1:0", job.output[-4000:]
    host = socket.gethostname().split(".")[0]
    assert f"srun: error: {host}: task 0: Exited with exit code 1" in job.output, job.output
    assert "RendezvousConnectionError" in job.output
    assert f"connect to ({UNREACHABLE}, {port})" in job.output, job.output[-4000:]
    assert took < READ_TIMEOUT + 40, took         # torchrun's own default: 60 s of trying
    assert not (tmp_path / "out.json").exists()


def test_a_node_that_never_joins_ends_the_others_after_the_join_timeout(tmp_path):
    """The batch script with its second node never started (a stand-in srun starts node
    0 alone): node 0 waits JOIN_TIMEOUT seconds for it, then ends with torchrun's
    RendezvousTimeoutError (the rendezvous does not know which node is missing; under
    Slurm, srun's error line names the node that waited, as above)."""
    fake = one_node_srun(tmp_path)
    node = start_node("node0", ["bash", str(SBATCH)], SCRIPTS, tmp_path,
                      PATH=f"{fake}:{BIN}:/usr/bin:/bin", SLURM_NNODES="2",
                      SLURM_JOB_NODELIST="node[1-2]", SLURM_GPUS_ON_NODE="1",
                      SLURM_JOB_ID="4242", RDZV_PORT=str(free_port()),
                      JOIN_TIMEOUT=str(JOIN_TIMEOUT), OUT=str(tmp_path / "out.json"))
    took = node.wait(timeout=JOIN_TIMEOUT + 90)
    assert node.proc.returncode != 0
    assert "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError" in \
        node.output(), node.output()[-3000:]
    assert JOIN_TIMEOUT <= took < JOIN_TIMEOUT + 60, took
    assert not (tmp_path / "out.json").exists()


def listening(port: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on port {port} within {timeout:.0f} s")


def test_a_node_that_dies_mid_training_ends_the_other_naming_its_rank_and_the_cause(
        tmp_path):
    """Two nodes train (many layouts in a row, so the run is long enough to be cut);
    node 0 starts first and hosts the rendezvous, as the first node of an allocation
    does. Once a rank has printed its first layout, node 1 dies, every process of it at
    once. The survivor's rank finds the connection gone in its next collective (gloo
    names the dead node's address) and torchrun ends, its summary naming the host, the
    rank and the exit code; far sooner than any time-out. (Were node 0 the one to die,
    the survivor would also lose the rendezvous' store and end with
    RendezvousConnectionError, without the summary: seen once here.)"""
    port = free_port()
    args = ["--layouts", *[LAYOUT] * 12]
    node0 = start_node("node0", two_node_cmd(0, port, *args), tmp_path, tmp_path)
    nodes = [node0]
    try:
        listening(port, timeout=120)                    # node 0 hosts the store
        nodes.append(start_node("node1", two_node_cmd(1, port, *args), tmp_path, tmp_path))
        wait_for(nodes, f"{LAYOUT}: loss", timeout=200)
        nodes[1].die()
        killed = time.monotonic()
        node0.wait(timeout=120)
        took = time.monotonic() - killed
    finally:
        stop_all(nodes)
    out = node0.output()
    assert node0.proc.returncode != 0
    assert (out + nodes[1].output()).count(f"{LAYOUT}: loss") < 12, \
        "the run ended before the node died"
    host = socket.getfqdn(socket.gethostname())    # as torchrun names it
    assert re.search(rf"host\s*:\s*{re.escape(host)}", out), out[-4000:]
    assert re.search(r"rank\s*:\s*[01] \(local_rank: 0\)", out), out[-4000:]
    assert re.search(r"exitcode\s*:\s*1", out), out[-4000:]
    # gloo names the dead node's address
    # gloo words it either way round: "Read error [127.0.0.1]:N: Connection reset by peer"
    # or "Connection closed by peer [127.0.0.1]:N" (both seen)
    assert re.search(r"\[127\.0\.0\.1\]:\d+: Connection (reset|closed) by peer"
                     r"|Connection (reset|closed) by peer \[127\.0\.0\.1\]:\d+", out), \
        out[-4000:]
    assert took < JOIN_TIMEOUT + 30, took


def test_the_scale_page_states_the_scripts_join_timeout_and_the_tests_lowered_ones():
    """What the page says about the time-outs is what the scripts and these tests use."""
    from . import test_capstone_nodes_paddle as paddle_tests

    page = (SCRIPTS.parent / "scale.md").read_text()
    for name in ("capstone_torch.sbatch", "capstone_paddle.sbatch"):
        assert "${JOIN_TIMEOUT:-300}" in (SCRIPTS / name).read_text(), name
        assert f"```{{literalinclude}} scripts/{name}" in page, name
    assert "**join time-out**, 300 s in the batch" in page
    assert (f"lower it to {JOIN_TIMEOUT} s (PyTorch) and {paddle_tests.JOIN_TIMEOUT} s "
            "(Paddle)") in page
    assert f"4 s in the test" in page and READ_TIMEOUT == 4
    assert "${READ_TIMEOUT:-60}" in SBATCH.read_text() and "`READ_TIMEOUT` (60 s" in page
