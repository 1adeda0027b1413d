"""The capstone's PyTorch script, launched as the page launches it (torchrun, gloo CPU
ranks): every layout's loss lies on the one-process loss within the page's tolerance,
the control (gradients averaged twice) does not, the layouts the script ran are the
planner's :class:`Layout`, and the collectives the page's prose explains are the ones
counted; a run resumed from another launch's checkpoint, in the same layout or in
another on another number of ranks, continues the run that saved it; a rank killed
mid-run is restarted by torchrun from the last committed checkpoint. The 16-rank 4-D
run and the elastic restart write the records the page shows."""
from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

import pytest

from grader.lab import capstone
from grader.lab.capstone.tables import measured_ops
from grader.lab.planner.composed import Layout

from ._run import BIN, SCRIPTS, attempts, run

pytestmark = pytest.mark.slow
PAGE_LAYOUTS = ["1x4x1x1", "2x2x1x1", "1x2x2x1", "1x2x1x2", "1x1x2x2"]   # as the page
# as the page: every layout saves its whole state at step 4, asynchronously, and
# 1x1x2x2's checkpoint is resumed as 1x1x2x2 and as 2x2x1x1
PAGE_CKPT = ["--ckpt-dir", "ckpt", "--async-save", "--resume", "1x1x2x2", "ckpt/1x1x2x2",
             "--resume", "2x2x1x1", "ckpt/1x1x2x2"]


def torchrun(tmp, ranks: int, *args: str, timeout: float = 400) -> dict:
    run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(ranks),
         str(SCRIPTS / "capstone_torch.py"), *args, "--out", "out.json"], tmp,
        timeout=timeout)
    return json.loads((tmp / "out.json").read_text())


@pytest.fixture(scope="module")
def four_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("capstone4")


@pytest.fixture(scope="module")
def four(four_dir) -> dict:
    return torchrun(four_dir, 4, "--layouts", *PAGE_LAYOUTS, "--control", "1x4x1x1",
                    *PAGE_CKPT)


@pytest.fixture(scope="module")
def two(four, four_dir) -> dict:
    """Two ranks resume, each in a layout the 4-rank launch did not save in: TP+PP's
    checkpoint as FSDP, HSDP's as a pipeline."""
    return torchrun(four_dir, 2, "--resume", "1x2x1x1", "ckpt/1x1x2x2",
                    "--resume", "1x1x1x2", "ckpt/2x2x1x1")


def test_every_layout_lies_on_the_one_process_loss_and_the_control_leaves_it(four):
    assert [r["layout"] for r in four["runs"] if r["resumed"]] == ["1x1x2x2", "2x2x1x1"]
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


def test_resumed_in_the_same_layout_the_run_continues_bit_for_bit(four):
    """The page's 4-rank launch: every layout saved at step 4 (asynchronously, each
    save committed), and 1x1x2x2 resumed from its own checkpoint: the same losses and
    learning rates as the uninterrupted run, to the last bit, from the data's
    position 4."""
    saved = [r for r in four["runs"] if not r["resumed"] and not r["control"]]
    for r in saved:
        assert len(r["save_s"]) == 1 and r["async_save"], r["layout"]
        stopped, total = r["save_s"][0]
        assert 0 < stopped <= total
    row, other = capstone.resumes([four])
    assert (row.layout, row.saved_layout, row.ranks, row.saved_ranks, row.start) == \
        ("1x1x2x2", "1x1x2x2", 4, 4, 4)
    assert row.same_layout and row.off_saver == 0.0 and row.lr_carried and row.continues
    # the page's other resume: the same checkpoint as HSDP on the same 4 ranks
    assert (other.layout, other.saved_layout, other.start) == ("2x2x1x1", "1x1x2x2", 4)
    assert not other.same_layout and other.continues
    resumed = [r for r in four["runs"] if r["resumed"]]
    assert {r["resumed"]["from"] for r in resumed} == {"ckpt/1x1x2x2/step-000004"}
    assert all(len(r["losses"]) == four["sizes"]["steps"] - 4 for r in resumed)


def test_resumed_on_two_ranks_in_other_layouts_the_run_continues(four, two):
    """N -> M: the 4-rank checkpoints of TP+PP and of HSDP, loaded on 2 ranks as FSDP
    and as a pipeline: the whole state resharded (weights, momentum, schedule, data),
    the losses within the page's tolerance of the saving runs', the rates equal."""
    rows = capstone.resumes([four, two])
    other = [r for r in rows if r.ranks == 2]
    assert [(r.saved_layout, r.layout) for r in other] == \
        [("1x1x2x2", "1x2x1x1"), ("2x2x1x1", "1x1x1x2")]
    for r in other:
        assert r.start == 4 and r.saved_ranks == 4 and not r.same_layout
        assert r.lr_carried and r.off_saver <= capstone.TOLERANCE, r
        assert r.off_alone <= capstone.TOLERANCE, r
        assert r.continues
    # the losses moved after the resume: the comparison is not of a flat curve
    losses = [r for r in two["runs"]][0]["losses"]
    assert max(losses) - min(losses) > 100 * capstone.TOLERANCE
    script = SCRIPTS / "capstone_torch.py"
    record = capstone.read_record(capstone.RECORD_RESHARD, script)
    if record is None or record["stale"]:
        capstone.write_record({"rows": [dataclasses.asdict(r) for r in other]}, script,
                              "torchrun --nproc_per_node 2 capstone_torch.py --resume "
                              "1x2x1x1 ckpt/1x1x2x2 --resume 1x1x1x2 ckpt/2x2x1x1 (after "
                              "the page's 4-rank launch)", capstone.RECORD_RESHARD)
    assert not capstone.read_record(capstone.RECORD_RESHARD, script)["stale"]


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


@pytest.mark.timeout(600)
def test_a_killed_rank_is_restarted_from_the_last_committed_checkpoint(tmp_path):
    """torchrun --max-restarts 1: rank 3 is killed (SIGKILL) at step 6, after its share
    of step 6's checkpoint is written and before the checkpoint is committed. torchrun
    restarts all four ranks; they pass over the uncommitted step 6 (all of its files
    on disk) and resume from step 4: the steps both attempts ran have the same losses
    to the last bit, and the run ends on the one-process curve. Writes the record the
    page shows when it is missing or stale."""
    command = ["torchrun", "--standalone", "--nproc_per_node", "4", "--max-restarts", "1",
               "capstone_torch.py", "--layouts", "1x2x1x2", "--ckpt-dir", "ckpt",
               "--save-every", "2", "--kill-at", "6"]
    script = command.index("capstone_torch.py")
    p = run([str(BIN / command[0]), *command[1:script], str(SCRIPTS / command[script]),
             *command[script + 1:], "--out", "out.json"], tmp_path, timeout=500,
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    out = json.loads((tmp_path / "out.json").read_text())
    launcher = [f"rank {m[2]} failed with exit code {m[1]}" for m in re.finditer(
        r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)", p.stdout + p.stderr)]
    assert launcher == ["rank 3 failed with exit code -9"], p.stderr[-3000:]
    first, second = attempts((tmp_path / "ckpt" / "1x2x1x2" / "losses.txt").read_text())
    assert [s for s, _ in first] == list(range(6)) and \
        [s for s, _ in second] == list(range(4, 8))
    assert first[4:] == second[:2]                       # bit for bit
    (resumed,) = out["runs"]
    assert resumed["resumed"]["from"] == "ckpt/1x2x1x2/step-000004"
    assert resumed["skipped"] == [{"name": "tmp-step-000006", "metadata": True}]
    assert resumed["start"] == 4 and [loss for _, loss in second] == resumed["losses"]
    curve = [loss for _, loss in first[:4] + second]
    assert capstone.worst_relative(curve, out["reference"]) <= capstone.TOLERANCE
    record = capstone.read_record(capstone.RECORD_ELASTIC, SCRIPTS / "capstone_torch.py")
    if record is None or record["stale"]:
        capstone.write_record({**out, "attempts": [first, second],
                               "launcher": launcher},
                              SCRIPTS / "capstone_torch.py",
                              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 " + " ".join(command),
                              capstone.RECORD_ELASTIC)
    assert not capstone.read_record(capstone.RECORD_ELASTIC,
                                    SCRIPTS / "capstone_torch.py")["stale"]
