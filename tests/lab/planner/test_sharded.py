"""The planner's transformer, ZeRO, tensor and pipeline plans: memory per rank, bytes,
time terms, refusal of plans that do not fit, and the search."""
import pytest

from grader.lab import planner as P

TINY = P.Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)


def cluster(n, memory=2**40, flops=1e12, bw=1e9, lat=1e-5):
    return P.Cluster("c", n, flops, memory, P.Link("l", bw, lat))


def test_the_transformer_counts_tinygpts_parameters():
    assert TINY.params == 215_808          # what tinygpt_torch.py and _paddle.py build
    assert TINY.block_params == 49_792


def test_the_plans_model_states_follow_zeros_table_where_the_tools_do():
    """Stages 0 and 1 and every stage's gradients and optimizer state are ZeRO's table;
    the parameters of stages 2 and 3 are as FSDP holds them (next test)."""
    c, p = cluster(4), TINY.params * 4
    mem = {z: P.predict_plan(TINY, P.Plan(dp=4, zero=z), c).memory_terms for z in range(4)}
    assert [mem[z]["params"] for z in (0, 1)] == [p, p]
    assert [mem[z]["grads"] for z in range(4)] == [p, p, p / 4, p / 4]
    assert [mem[z]["optimizer"] for z in range(4)] == [2 * p, p / 2, p / 2, p / 2]
    with pytest.raises(ValueError, match="stages 0"):
        P.predict_plan(TINY, P.Plan(dp=4, zero=4), c)


def test_a_transformer_with_impossible_sizes_says_which():
    with pytest.raises(ValueError, match="width=0"):
        P.Transformer(vocab=10, width=0, heads=1, blocks=1, seq=1, batch=1)
    with pytest.raises(ValueError, match="blocks=0"):
        P.Transformer(vocab=10, width=8, heads=1, blocks=0, seq=1, batch=1)
    with pytest.raises(ValueError, match="multiple of heads"):
        P.Transformer(vocab=10, width=10, heads=4, blocks=1, seq=1, batch=1)


def test_the_plans_memory_follows_the_chapters_mechanisms():
    c = cluster(4)
    mem = {z: P.predict_plan(TINY, P.Plan(dp=4, zero=z), c).memory_terms for z in range(4)}
    whole = TINY.params * 4
    assert mem[2]["params"] == whole * (1 + 1 / 4)      # gathered model and its shards
    assert whole / 4 < mem[3]["params"] < whole / 4 + 2 * TINY.block_params * 4
    assert mem[0]["activations"] == mem[3]["activations"]
    gpipe = P.predict_plan(TINY, P.Plan(pp=4, micro=8, schedule="GPipe"), c)
    one_f = P.predict_plan(TINY, P.Plan(pp=4, micro=8, schedule="1F1B"), c)
    assert one_f.memory_terms["activations"] == gpipe.memory_terms["activations"] / 2
    assert one_f.step_s == gpipe.step_s                 # the same bubble


def test_the_bubble_stretches_the_computation():
    assert P.bubble_fraction(2, 4) == pytest.approx(1 / 5)
    c = cluster(2, bw=1e30, lat=0.0)
    plan = P.predict_plan(TINY, P.Plan(pp=2, micro=4), c)
    alone = TINY.flops_per_token() * TINY.batch * TINY.seq / 2 / c.flops
    assert plan.terms["compute"] == pytest.approx(alone / (1 - P.bubble_fraction(2, 4)))


def test_bytes_sent_per_stage_of_zero():
    c, whole = cluster(4), TINY.params * 4
    sent = {z: P.predict_plan(TINY, P.Plan(dp=4, zero=z), c).sent for z in range(4)}
    assert sent[0] == pytest.approx(2 * 3 / 4 * whole)      # one all-reduce
    assert sent[2] == pytest.approx(sent[0])                # reduce-scatter + all-gather
    assert sent[3] == pytest.approx(1.5 * sent[0])          # + a second all-gather
    assert sent[1] == pytest.approx(1.5 * sent[0])          # all-reduce + broadcasts


def test_plans_that_do_not_fit_are_refused_and_the_fastest_that_fits_is_chosen():
    dp_needs = P.predict_plan(TINY, P.Plan(dp=4), cluster(4)).memory
    best, preds = P.plan_search(TINY, cluster(4, memory=dp_needs * 0.8))
    assert best is not None and best.fits and best.memory <= dp_needs * 0.8
    assert not next(p for p in preds if p.plan == P.Plan(dp=4)).fits
    assert all(p.fits for p in preds[:preds.index(best) + 1])
    nothing, _ = P.plan_search(TINY, cluster(4, memory=1024))
    assert nothing is None


def test_a_slow_link_between_machines_keeps_data_parallel_collectives_off_it():
    big = P.Transformer(vocab=50304, width=4096, heads=32, blocks=32, seq=2048, batch=64)
    best, _ = P.plan_search(big, P.PRESETS["2 x 8 GPUs, Ethernet"])
    assert best is not None and best.plan.dp == 1


def test_impossible_plans_say_why():
    with pytest.raises(ValueError, match="do not split into 3 stages"):
        P.predict_plan(TINY, P.Plan(pp=3), cluster(3))
    with pytest.raises(ValueError, match="needs data-parallel ranks"):
        P.predict_plan(TINY, P.Plan(zero=2), cluster(1))
    with pytest.raises(ValueError, match="uses 4 devices"):
        P.predict_plan(TINY, P.Plan(dp=4), cluster(2))
