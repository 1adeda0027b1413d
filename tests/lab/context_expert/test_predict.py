"""The planner beside the page's runs: rows, tables and the sentences chosen from them."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from grader.lab.context_expert import (moe_predictions, moe_table, moe_words,
                                       ring_predictions, ring_table, ring_words)
from grader.lab.context_expert.predict import count_words

RECORDED = Path(__file__).parent / "recorded"


def _run(name):
    return json.loads((RECORDED / name).read_text())


def test_ring_rows_compare_pairs_and_bytes_exactly_and_time_per_rank():
    rows = ring_predictions(_run("r2_sent.json"))
    assert len(rows) == 6
    assert all(r["error"]["pairs"] == 0 and r["error"]["sent"] == 0 for r in rows)
    assert all((r["error"]["busy"] is None) == (not r["causal"]) for r in rows)
    text = ring_words(rows)
    assert "chunk pairs equal the recorded ones in all 6 cases" in text
    assert "bytes sent equal the recorded ones in all 6 cases" in text
    assert "256/256" in ring_table(rows)


def test_a_run_recorded_before_the_byte_count_says_so():
    rows = ring_predictions(_run("r4.json"))
    assert all(r["sent"][1] is None for r in rows)
    assert "did not record bytes sent" in ring_words(rows)
    assert "not recorded" in ring_table(rows)


def test_time_words_follow_the_error():
    run = _run("r2_sent.json")
    plain = next(c for c in run["runs"] if not c["causal"])
    per_pair = min(plain["ranks"][0]["busy_s"]) / plain["ranks"][0]["pairs"]
    exact = copy.deepcopy(run)
    for c in exact["runs"]:
        for r in c["ranks"]:
            r["busy_s"] = [r["pairs"] * per_pair] * 3
    for r in next(c for c in exact["runs"] if not c["causal"])["ranks"]:
        r["busy_s"] = [r["pairs"] * per_pair] * 3
    assert "explains the causal work well" in ring_words(ring_predictions(exact))
    slow = copy.deepcopy(exact)
    for c in slow["runs"]:
        if c["causal"]:
            for r in c["ranks"]:
                r["busy_s"] = [2 * t for t in r["busy_s"]]
    words = ring_words(ring_predictions(slow))
    assert "median of 50 %" in words and "below the measurement" in words
    assert "does not say what the rest is" in words


def test_moe_rows_and_words_on_the_recorded_runs():
    for name, op in (("m4.json", "all_to_all"), ("pm2.json", "all_gather")):
        rows = moe_predictions(_run(name))
        assert [r["op"] for r in rows] == [op] * 3
        assert all(v == 0 for r in rows for v in r["error"].values())
        words = moe_words(rows)
        assert "equal the recorded ones in all 9 cases" in words
        assert "dropped assignments equal the recorded ones in all 3 cases" in words
        # the untrained router drops some at factor 1; an even one would drop none
        assert "predicts 0 dropped at capacity factor 1 where" in words
        assert "underestimates" in words
        assert "factor" in moe_table(rows)
    m4 = moe_predictions(_run("m4.json"))
    assert [r["sent"] for r in m4] == [3 / 4 * r["buffer"][0] for r in m4]
    # one expert of TinyGPT's MLP shape per rank: 64*256 + 256 + 256*64 + 64
    assert m4[0]["expert_params"] == 33088
    assert "33,088 (1 of 4 experts), and the router's 256" in moe_table(m4)


def test_an_even_router_and_a_mismatch_are_worded_from_the_values():
    run = _run("m4.json")
    for conf in run["runs"]:
        for r in conf["ranks"]:
            r["sent"] = [64] * 4
            r["kept"] = [min(64, conf["capacity"])] * 4
    assert "spread its tokens evenly enough" in moe_words(moe_predictions(run))
    assert count_words([0.0, 0.5, None], "x") == (
        "the planner's x differ from the recorded ones in 1 of 2 cases (by up to 50 %)")
    assert "stand alone" in count_words([None], "x")


def test_search_words_name_the_choice_the_runner_up_and_a_refusal():
    from dataclasses import replace

    from grader.lab.context_expert import search_words
    from grader.lab.planner import PRESETS, Transformer, mesh_search

    model = Transformer(vocab=32000, width=1024, heads=8, blocks=4, seq=32768, batch=1,
                        itemsize=2)
    gpus = replace(PRESETS["8 GPUs NVLink"], memory=12 * 2**30)
    best, preds = mesh_search(model, gpus)
    words = search_words(best, preds)
    assert words.startswith(f"Of {len(preds)} plans the planner chooses {best.plan}: ")
    refused = [p for p in preds if not p.fits]
    assert f"It refuses {len(refused)} for memory, for instance: {refused[0].refused}" \
        in words
    assert "contiguous split is" in words            # the best is a zig-zag ring
    none = search_words(*mesh_search(model, replace(gpus, memory=2**30)))
    assert none.startswith(f"None of the {len(preds)} plans fits")
    roomy = search_words(*mesh_search(model, replace(gpus, memory=2**40)))
    assert roomy.endswith("Every plan fits.")
