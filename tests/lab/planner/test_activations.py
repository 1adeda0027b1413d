"""The planner's fitting knobs: precision and recomputation change the bytes they should,
by the amounts the fitting chapter states, and the planner says which knob made a plan
fit."""
import pytest

from grader.lab import planner as P
from grader.lab.planner.activations import memory_terms, recompute_flops

TINY = P.Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)
BIG = P.Transformer(vocab=50304, width=4096, heads=32, blocks=32, seq=2048, batch=64)


def cluster(n, memory=2**40):
    return P.Cluster("c", n, 1e12, memory, P.Link("l", 1e9, 1e-5))


def test_fp32_model_states_are_the_sharded_planners():
    c = cluster(4)
    for zero in range(4):
        plan = P.Plan(dp=4, zero=zero)
        old = P.predict_plan(TINY, plan, c).memory_terms
        new = memory_terms(TINY, plan)
        for kind in ("params", "grads", "optimizer"):
            assert new[kind] == pytest.approx(old[kind]), (zero, kind)


def test_mixed_precision_holds_2_2_12_bytes_per_parameter_and_zero_1_shards_the_12():
    bf16 = P.Knobs("bf16")
    one = memory_terms(TINY, P.Plan(), bf16)
    n = TINY.params
    assert (one["params"], one["grads"], one["optimizer"]) == (2 * n, 2 * n, 12 * n)
    z1 = memory_terms(TINY, P.Plan(dp=4, zero=1), bf16)
    assert z1["optimizer"] == pytest.approx(12 * n / 4) and z1["params"] == 2 * n


def test_selective_recomputation_drops_exactly_the_scores_and_bf16_halves_the_blocks():
    plan = P.Plan()
    none = memory_terms(TINY, plan)["activations"]
    sel = memory_terms(TINY, plan, P.Knobs("fp32", "selective"))["activations"]
    full = memory_terms(TINY, plan, P.Knobs("fp32", "full"))["activations"]
    tokens = TINY.batch * TINY.seq
    assert none - sel == 4 * TINY.blocks * tokens * TINY.heads * TINY.seq
    assert full < sel < none
    half = memory_terms(TINY, plan, P.Knobs("bf16"))["activations"]
    edges = tokens * (TINY.vocab * 4 + 16)          # the FP32 log-softmax, token ids
    assert half - edges == pytest.approx((none - edges) / 2)


def test_activations_follow_the_micro_batches_in_flight():
    c = cluster(2)
    gpipe = memory_terms(TINY, P.Plan(pp=2, micro=8, schedule="GPipe"))["activations"]
    ofob = memory_terms(TINY, P.Plan(pp=2, micro=8, schedule="1F1B"))["activations"]
    assert gpipe == pytest.approx(4 * ofob)          # 8 in flight against 2
    assert P.predict_fitted(TINY, P.Plan(pp=2, micro=8), c).fits


def test_recomputation_adds_compute_full_more_than_selective():
    c = cluster(1)
    t = {r: P.predict_fitted(TINY, P.Plan(), c, P.Knobs("fp32", r)) for r in P.RECOMPUTE}
    assert t["none"].step_s < t["selective"].step_s < t["full"].step_s
    assert recompute_flops(TINY, "none") == 0
    assert t["full"].added_compute == pytest.approx(
        recompute_flops(TINY, "full") / TINY.flops_per_token())


def test_a_plan_refused_in_fp32_fits_with_a_knob_and_the_planner_names_it():
    gpus = P.PRESETS["8 GPUs NVLink"]
    r = P.make_it_fit(BIG, P.Plan(dp=8, zero=3), gpus)
    assert not r.plain.fits and r.chosen is not None and r.chosen.fits
    words = r.explain(gpus.memory)
    assert all(k in words for k in r.chosen.knobs.turned) and "made it fit" in words
    assert max(len(line) for line in words.splitlines()) <= 100   # fits an output box
    # the choice is the fastest setting that fits
    assert r.chosen.step_s == min(p.step_s for p in r.tried if p.fits)


def test_a_plan_that_fits_needs_no_knob_and_one_that_never_fits_says_so():
    r = P.make_it_fit(TINY, P.Plan(dp=2), cluster(2))
    assert r.plain.fits and "no knob needed" in r.explain(2**40)
    r = P.make_it_fit(TINY, P.Plan(dp=2), cluster(2, memory=1024))
    assert r.chosen is None and "no precision or recomputation" in r.explain(1024)


def test_16_bit_plans_are_priced_at_the_presets_stated_bf16_rate():
    gpus = P.PRESETS["8 GPUs NVLink"]
    assert gpus.bf16_flops == 312e12 and "312 TFLOP/s" in gpus.assumptions
    plan = P.Plan(dp=8, zero=3)
    fp32 = P.predict_fitted(BIG, plan, gpus, P.Knobs("fp32", "full"))
    bf16 = P.predict_fitted(BIG, plan, gpus, P.Knobs("bf16", "full"))
    assert bf16.step_s < fp32.step_s


def test_the_search_over_plans_and_knobs_finds_a_fit_the_fp32_search_ranks_lower():
    gpus = P.PRESETS["8 GPUs NVLink"]
    best, preds = P.fitting_search(BIG, gpus)
    old, _ = P.plan_search(BIG, gpus)
    assert best.fits and best.step_s <= old.step_s
    assert preds[0] is best and all(p.fits for p in preds[:1])


def test_unknown_knobs_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="fp32"):
        P.Knobs("fp8")
    with pytest.raises(ValueError, match="selective"):
        P.Knobs("fp32", "some")
