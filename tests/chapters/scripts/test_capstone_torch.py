"""The capstone's PyTorch script, launched as the page launches it (torchrun, gloo CPU
ranks): every layout's loss lies on the one-process loss within the page's tolerance,
the control (gradients averaged twice) does not, the layouts the script ran are the
planner's :class:`Layout`, and the collectives the page's prose explains are the ones
counted. The 16-rank 4-D run writes the record the page shows."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from grader.lab import capstone
from grader.lab.capstone.tables import measured_ops
from grader.lab.planner.composed import Layout

from ._run import BIN, SCRIPTS, run

pytestmark = pytest.mark.slow
PAGE_LAYOUTS = ["1x4x1x1", "2x2x1x1", "1x2x2x1", "1x2x1x2", "1x1x2x2"]   # as the page


def torchrun(tmp, ranks: int, *args: str, timeout: float = 400) -> dict:
    run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(ranks),
         str(SCRIPTS / "capstone_torch.py"), *args, "--out", "out.json"], tmp,
        timeout=timeout)
    return json.loads((tmp / "out.json").read_text())


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> dict:
    return torchrun(tmp_path_factory.mktemp("capstone4"), 4, "--layouts", *PAGE_LAYOUTS,
                    "--control", "1x4x1x1")


def test_every_layout_lies_on_the_one_process_loss_and_the_control_leaves_it(four):
    rows = capstone.parity(four)
    assert [(r.layout, r.control) for r in rows] == \
        [(t, False) for t in PAGE_LAYOUTS] + [("1x4x1x1", True)]
    for r in rows:
        if r.control:
            # averaged twice over 4 ranks: every step a quarter of the right one
            assert not r.within and r.worst > 100 * capstone.TOLERANCE, r
        else:
            assert r.within, r
    # the curve moved: the comparison is not of losses that never changed
    assert four["reference"][0] - four["reference"][-1] > 100 * capstone.TOLERANCE


def test_the_runs_layouts_are_the_planners(four):
    for run_ in four["runs"]:
        layout = Layout.parse(run_["layout"])
        assert (layout.replicate, layout.shard, layout.tp, layout.pp) == \
            (run_["replicate"], run_["shard"], run_["tp"], run_["pp"])
        assert layout.ranks == four["world"]


def test_the_collectives_the_page_explains(four):
    blocks, micro = four["sizes"]["blocks"], four["sizes"]["micro"]
    ops = {r["layout"]: measured_ops(r) for r in four["runs"] if not r["control"]}
    # FSDP: each block gathered for forward and backward, the root unit (embedding,
    # final norm, head) once; one reduce-scatter per unit
    assert ops["1x4x1x1"] == Counter(all_gather=2 * blocks + 1,
                                     reduce_scatter=blocks + 1)
    # HSDP adds one all-reduce per unit across the replicas
    assert ops["2x2x1x1"] == Counter(all_gather=2 * blocks + 1,
                                     reduce_scatter=blocks + 1, all_reduce=blocks + 1)
    # a pipeline boundary: one send and one receive per micro-batch on rank 0
    assert ops["1x2x1x2"]["send"] == ops["1x2x1x2"]["recv"] == micro


def test_memory_is_measured_where_the_page_says_and_priced_for_the_same_layout(four):
    """MemTracker's peak for every layout without a pipeline (it refuses a stage called
    once per micro-batch), its kinds adding up to its total; the planner prices the
    same Layout (the page states the difference)."""
    for run_ in four["runs"]:
        peak = run_["peak_bytes"]
        if run_["pp"] > 1:
            assert peak == {}, run_["layout"]
            continue
        kinds = sum(v for k, v in peak.items() if k != "Total")
        assert peak["Total"] == kinds and peak["Parameter"] >= run_["state_bytes"] > 0
    rows = capstone.memory_rows(four)
    assert [r["layout"].text for r in rows] == ["1x4x1x1", "2x2x1x1", "1x2x2x1"]
    assert all(abs(r["error"]) < 1 for r in rows)       # same order of size


def test_the_ranks_flops_add_up_to_one_process_in_every_layout(four):
    """FlopCounterMode's formulas on each rank's local tensors, summed over the ranks:
    the tensor-parallel splits (embedding and head included), the pipeline's stages and
    micro-batches and the data-parallel shares of the batch each count their part."""
    for run_ in four["runs"]:
        assert len(run_["flops"]) == four["world"] and min(run_["flops"]) > 0
        assert sum(run_["flops"]) == four["reference_flops"], run_["layout"]
    # TP splits the products: its ranks count equal shares, not the whole product each
    tp = next(r for r in four["runs"] if r["layout"] == "1x2x2x1")
    assert tp["flops"][0] == four["reference_flops"] // 4


def test_the_planners_flops_per_token_differ_by_the_biases_and_norms(four):
    """The page's explanation of the gap: the planner counts 6 FLOPs per token for the
    parameters FlopCounterMode does not see (biases, norms), nothing else differs."""
    counted, planned = capstone.flops_per_token(four)
    s = four["sizes"]
    w, blocks = s["width"], s["blocks"]
    products = blocks * 12 * w * w + w * s["vocab"]          # weights of the products
    attention = 12 * s["seq"] * w * blocks
    assert counted == 6 * products + attention
    # every parameter but the embedding's, as the planner counts them
    model_params = blocks * (12 * w * w + 10 * w) + (w + 1) * s["vocab"] + 2 * w
    assert planned - counted == 6 * (model_params - products)


@pytest.mark.timeout(900)
def test_sixteen_ranks_four_axes_and_its_record(tmp_path):
    """The 4-D layout on 16 ranks; its record is (re)written when missing or stale (the
    script changed), so the page never shows a run of another script as current."""
    result = torchrun(tmp_path, 16, "--layouts", "2x2x2x2", timeout=800)
    (row,) = capstone.parity(result)
    assert row.within and row.layout == "2x2x2x2", row
    record = capstone.read_record(capstone.RECORD_16, SCRIPTS / "capstone_torch.py")
    if record is None or record["stale"]:
        capstone.write_record(result, SCRIPTS / "capstone_torch.py",
                              "torchrun --standalone --nproc_per_node 16 "
                              "capstone_torch.py --layouts 2x2x2x2",
                              capstone.RECORD_16)
    assert not capstone.read_record(capstone.RECORD_16,
                                    SCRIPTS / "capstone_torch.py")["stale"]
