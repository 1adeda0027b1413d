"""Assignment 8's checks, against the auto-parallel chapter's planner."""
import pytest

from grader.checks import a8_placements as a8_public
from tests.checks import a8_solutions as sol
from tests.checks.notebooks import hidden_checks

a8 = hidden_checks("a8_placements")         # exercises/hidden


@pytest.mark.parametrize("fn", [sol.predict_reference, sol.predict_by_pairs])
def test_correct_predictions_score_full_marks(fn):
    r = a8.check_predictions(fn)
    assert r.points == r.max_points == 6


def test_the_planner_itself_in_the_assignment_format_scores_full_marks():
    assert a8.check_predictions(a8.reference_communication).passed


@pytest.mark.parametrize("fn", [sol.choose_by_search, sol.choose_by_rule])
def test_correct_choices_score_full_marks(fn):
    r = a8.check_choices(fn)
    assert r.points == r.max_points == 3


def test_sizes_in_elements_keep_the_collective_points_and_say_bytes():
    r = a8.check_predictions(sol.predict_elements)
    assert r.points == 3 and "4 bytes" in r.hint


def test_forgetting_the_backward_pass_loses_the_configurations_that_communicate_backward():
    r = a8.check_predictions(sol.predict_forward_only)
    assert r.points == 3 and "backward" in r.hint and r.message.startswith("3 of 6")


def test_shard_sizes_are_caught():
    r = a8.check_predictions(sol.predict_shard_sizes)
    assert r.points == 3.5 and "full tensor" in r.hint


def test_always_data_parallel_wins_only_the_large_batch():
    r = a8.check_choices(sol.choose_always_dp)
    assert r.points == 1 and "8 tokens" in r.message


def test_an_invalid_strategy_is_named_as_such():
    r = a8.check_choices(sol.choose_invalid)
    assert r.points == 0 and "not a valid strategy" in r.seen


def test_each_scenario_has_a_clear_winner():
    from grader.lab import planner

    for _, dims, batch, cluster in a8_public.SCENARIOS:
        best, preds = planner.best_strategy(dims, batch, cluster)
        assert preds[1].step_s >= 1.2 * best.step_s


def test_public_checks_accept_a_well_formed_answer_and_reject_a_stub():
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert a8_public.public_predict(sol.predict_reference).passed and a8_public.public_choose(sol.choose_by_rule).passed
    assert not a8_public.public_predict(stub).passed and not a8_public.public_choose(stub).passed


def test_the_same_submission_gets_the_same_score_ten_times():
    assert len({(a8.check_predictions(sol.predict_shard_sizes).points,
                 a8.check_choices(sol.choose_always_dp).points) for _ in range(10)}) == 1


def test_the_notebooks_reference_solution_scores_full_marks():
    from tests.checks.notebooks import namespace

    ns = namespace("a8_placements", {})
    assert [r.points for r in a8.check_all(ns["predict_communication"], ns["choose_strategy"])] == [6, 3]
