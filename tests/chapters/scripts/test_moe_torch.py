"""moe_torch.py on 2 gloo ranks (two experts each; the page runs 4, one each) with
torchrun: the output and every gradient equal one process's with the same routing, and
the tokens kept and dropped follow the capacity rule on routing recomputed here."""
from __future__ import annotations

import pytest

from ._launch import run_script
from ._moe_checks import check_moe_run, script_module

pytestmark = pytest.mark.slow


def test_moe_equals_one_process_and_drops_by_the_capacity_rule(tmp_path):
    import torch

    data, log = run_script("moe_torch.py", 2, tmp_path)
    assert data["framework"] == "PyTorch" and data["world"] == 2
    moe, gpt = script_module("moe_torch"), script_module("tinygpt_torch")
    router, _ = moe.make_layer()
    with torch.no_grad():
        x = gpt.TinyGPT().embed(gpt.batch(0)[0]).reshape(-1, gpt.WIDTH)
        top = router(x).softmax(-1).topk(moe.TOP_K, dim=-1).indices
    check_moe_run(data, top.tolist())
    assert log.count("capacity factor") == len(data["runs"])
