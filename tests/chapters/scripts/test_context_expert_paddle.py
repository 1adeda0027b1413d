"""context_expert_paddle.py, the page's one launch, on 2 gloo ranks with
paddle.distributed.launch (the page runs 4): it runs ring_attention_paddle.py's
experiment, then moe_paddle.py's, in the same parallel environment. Ring attention
equals full attention with and without a causal mask and the chunk pairs each rank
computes are what the layouts promise; the MoE layer (two experts per rank) equals one
process's with the same routing, the tokens kept and dropped follow the capacity rule on
routing recomputed here, and dist.alltoall is tried first (on gloo, all_gather stands
in for it)."""
from __future__ import annotations

import pytest

from ._launch import run_driver
from ._moe_checks import check_moe_run, script_module
from ._ring_checks import check_ring_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_driver("context_expert_paddle.py", 2, tmp_path_factory.mktemp("ctx"))


def test_ring_equals_full_attention_and_counts_the_promised_pairs(run):
    data, _, log = run
    assert data["framework"] == "Paddle" and data["world"] == 2
    check_ring_run(data)
    assert "zigzag, causal: chunk pairs per rank [5, 5]" in log
    assert f"RingFlashAttention on cpu: {data['ring_flash_attention']}" in log


def test_moe_equals_one_process_and_drops_by_the_capacity_rule(run):
    import paddle

    _, data, log = run
    assert data["framework"] == "Paddle" and data["world"] == 2
    # the script wraps the sentence to the page's width
    assert " ".join(f"dist.alltoall on cpu: {data['alltoall']}".split()) in \
        " ".join(log.split())
    want = "alltoall" if data["alltoall"] == "ran" else "all_gather"
    assert {c[0] for r in data["runs"] for s in r["ranks"] for c in s["collectives"]} \
        == {want}
    moe, gpt = script_module("moe_paddle"), script_module("tinygpt_paddle")
    router, _ = moe.make_layer()
    with paddle.no_grad():
        x = gpt.TinyGPT().embed(gpt.batch(0)[0]).reshape([-1, gpt.WIDTH])
        probs = paddle.nn.functional.softmax(router(x), -1)
        top = paddle.topk(probs, moe.TOP_K, axis=-1)[1]
    check_moe_run(data, top.tolist())
    ring, mixture = log.split("mixture of experts (moe_paddle.py):")
    assert "ring attention (ring_attention_paddle.py):" in ring
    assert "capacity factor" not in ring
    assert mixture.count("capacity factor") == len(data["runs"])
