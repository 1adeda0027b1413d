"""Assignment 8's checks: link-by-link traffic of placements on tp x dp ranks, and the rank
order that keeps it inside the nodes. The reference is the hidden module's, not the
chapter's planner; the planner wrapped as an answer does not pass."""
import pytest

from grader.checks import a8_placements as a8_public
from tests.checks import a8_solutions as sol
from tests.checks.notebooks import hidden_checks, namespace

a8 = hidden_checks("a8_placements")         # exercises/hidden


@pytest.mark.parametrize("fn", [sol.links_by_collectives, sol.links_per_rank])
def test_correct_link_bytes_score_full_marks(fn):
    r = a8.check_links(fn)
    assert r.points == r.max_points == 6, r.text()


@pytest.mark.parametrize("fn", [sol.order_by_counting, sol.order_by_group_traffic])
def test_correct_orders_score_full_marks(fn):
    r = a8.check_orders(fn)
    assert r.points == r.max_points == 4, r.text()


def test_the_worked_example_of_the_notebook_is_what_the_reference_gives():
    assert a8.link_bytes([8, 16, 4], ("col", "row"), 4, 2, 1) == {(0, 1): 64, (1, 0): 64}
    # the dp example: all layers col, tp = 2: (64 * 256 + 256 * 32) / 2 * 4 bytes held
    assert a8.step_collectives_tp_dp([64, 256, 32], ("col", "col"), 16, 2, 2)[-1] == ("all_reduce", "dp", 49152)


def test_the_reference_agrees_with_the_chapters_planner_on_every_collective():
    """The same cost model (sizes of the collectives, bytes per rank), written separately."""
    from grader.lab import planner

    for dims, pl, batch, tp, dp, _ in a8.CONFIGS:
        mine = sorted((op, size) for op, _, size in a8.step_collectives_tp_dp(dims, pl, batch, tp, dp)
                      if (tp > 1 if _ == "tp" else dp > 1))
        theirs = sorted((c.op, c.size) for c in planner.comm_plan(dims, pl, batch, tp, dp))
        assert mine == theirs, (dims, pl, tp, dp)


def test_the_planner_wrapped_as_an_answer_does_not_pass():
    """What a student could import from the chapter prices collectives; it does not say which
    rank sends what to which rank: wrapped the obvious way, it misses the links."""
    from grader.lab import planner

    def wrapped(dims, placements, batch, tp=2, dp=1, order="tp"):
        ranks = tp * dp
        sent = planner.comm_bytes([(i, o) for i, o in zip(dims[:-1], dims[1:])], placements,
                                  batch, tp=tp, dp=dp)
        return {(r, (r + 1) % ranks): sent for r in range(ranks)} if sent else {}

    r = a8.check_links(wrapped)
    assert r.points <= 2, r.text()


@pytest.mark.parametrize("fn, points, says", [
    (sol.links_forward_only, 4.5, "backward pass"),
    (sol.links_unsharded_dp, 4.0, "1/tp of a sharded layer"),
    (sol.links_whole_tensor, 3.0, "share of the tensor"),
])
def test_each_typical_mistake_loses_its_points_and_the_hint_names_it(fn, points, says):
    r = a8.check_links(fn)
    assert r.points == points and says in r.hint, r.text()


def test_ranks_numbered_the_wrong_way_are_named():
    def swapped(dims, placements, batch, tp=2, dp=1, order="tp"):
        return sol.links_by_collectives(dims, placements, batch, tp, dp,
                                        "dp" if order == "tp" else "tp")

    r = a8.check_links(swapped)
    assert r.points < 6 and "rank = d * tp + t" in r.hint, r.text()


def test_sizes_in_elements_and_a_backwards_ring_are_named():
    def elements(*args, **kwargs):
        return {k: v / 4 for k, v in sol.links_by_collectives(*args, **kwargs).items()}

    def backwards(*args, **kwargs):
        return {(d, s): v for (s, d), v in sol.links_by_collectives(*args, **kwargs).items()}

    assert "4 per float32" in a8.check_links(elements).hint
    r = a8.check_links(backwards)
    assert "the one after it" in r.hint and r.points < 6, r.text()


def test_wrong_orders_lose_their_scenarios():
    assert a8.check_orders(sol.order_always_tp).points == 2
    r = a8.check_orders(sol.order_forward_only)
    assert r.points == 3 and "3072 tokens" in r.message
    r = a8.check_orders(sol.order_invalid)
    assert r.points == 0 and "'tp' or 'dp'" in r.hint


def test_each_scenario_is_clear_and_each_typical_mistake_turns_one_around():
    flipped = set()
    for _, dims, pl, batch, tp, dp, per_node in a8.SCENARIOS:
        cross = sorted(a8.cross_node_bytes(a8.link_bytes(dims, pl, batch, tp, dp, o), per_node)
                       for o in ("tp", "dp"))
        assert cross[1] >= 1.25 * cross[0]
        best = a8.best_order(dims, pl, batch, tp, dp, per_node)
        flipped |= {m for m in ("forward_only", "unsharded_dp")
                    if a8.best_order(dims, pl, batch, tp, dp, per_node, frozenset([m])) != best}
    assert flipped == {"forward_only", "unsharded_dp"}
    assert {a8.best_order(*s[1:]) for s in a8.SCENARIOS} == {"tp", "dp"}


def test_a_raising_answer_scores_zero_and_says_so():
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert a8.check_links(stub).points == 0 and "not implemented" in a8.check_links(stub).text()
    assert not a8_public.public_link_bytes(stub).passed and not a8_public.public_choose_order(stub).passed


def test_public_checks_accept_a_well_formed_answer():
    assert a8_public.public_link_bytes(sol.links_per_rank).passed
    assert a8_public.public_choose_order(sol.order_by_counting).passed
    assert not a8_public.public_link_bytes(lambda *a, **k: [1, 2]).passed


def test_the_same_submission_gets_the_same_score_ten_times():
    assert len({(a8.check_links(sol.links_unsharded_dp).points,
                 a8.check_orders(sol.order_forward_only).points) for _ in range(10)}) == 1


def test_the_notebooks_reference_solution_scores_full_marks():
    ns = namespace("a8_placements", {})
    assert [r.points for r in a8.check_all(ns["link_bytes"], ns["choose_order"])] == [6, 4]
