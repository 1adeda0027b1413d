"""moe_paddle.py on 4 gloo ranks (one expert each; the page runs 2, two each) with
paddle.distributed.launch: the output and every gradient equal one process's with the
same routing, the tokens kept and dropped follow the capacity rule on routing recomputed
here, and dist.alltoall is tried first (on gloo, all_gather stands in for it)."""
from __future__ import annotations

import pytest

from ._launch import run_script
from ._moe_checks import check_moe_run, script_module

pytestmark = pytest.mark.slow


def test_moe_equals_one_process_and_drops_by_the_capacity_rule(tmp_path):
    import paddle

    data, log = run_script("moe_paddle.py", 4, tmp_path)
    assert data["framework"] == "Paddle" and data["world"] == 4
    assert f"dist.alltoall on cpu: {data['alltoall']}" in log
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
