"""The pipeline-schedules page's helpers, on timelines built in memory: the replay of an
order, the bubble and the activations in flight it measures, and the sentences it picks
from the numbers."""
from __future__ import annotations

import pytest

from grader.lab.pipeline_schedules import ScheduleRow, in_flight, replay
from grader.lab.pipeline_schedules.measure import bubble_of
from grader.lab.pipeline_schedules.words import compare, departure, versus
from grader.lab.planner import schedules as S


def one_f_one_b(rank: int, p: int, m: int) -> list[tuple]:
    warm = min(m, p - rank - 1)
    order = [("F", rank, i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", rank, warm + i), ("B", rank, i)]
    return order + [("B", rank, i) for i in range(m - warm, m)]


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (3, 6)])
def test_1f1b_on_equal_stages_idles_its_formula(p, m):
    ran = replay([one_f_one_b(r, p, m) for r in range(p)],
                 lambda k, s: 1.0 if k == "F" else 2.0, p)
    assert bubble_of(ran) == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)


def test_a_slower_last_stage_makes_the_bubble_grow():
    orders = [one_f_one_b(r, 2, 4) for r in range(2)]
    equal = bubble_of(replay(orders, lambda k, s: 1.0, 2))
    slow = bubble_of(replay(orders, lambda k, s: 2.0 if s == 1 else 1.0, 2))
    assert slow > equal


def test_split_backward_holds_activations_until_the_weight_gradient():
    events = [("F", 0, 0, 0, 1), ("F", 0, 1, 1, 2), ("B", 0, 0, 2, 3),
              ("F", 0, 2, 3, 4), ("W", 0, 0, 4, 5), ("B", 0, 1, 5, 6), ("W", 0, 1, 6, 7),
              ("B", 0, 2, 7, 8), ("W", 0, 2, 8, 9)]
    assert in_flight(events, {0: 10.0}) == (3, 30.0)    # B0 freed nothing: W0 came later
    plain = [e for e in events if e[0] != "W"]
    assert in_flight(plain, {0: 10.0}) == (2, 20.0)


def test_zero_bubble_formulas_fall_below_1f1b_and_interleaving_below_both():
    assert S.bubble("ZBV zero bubble", 2, 8) < S.bubble("Interleaved 1F1B", 2, 8) \
        < S.bubble("1F1B", 2, 8) == S.bubble("GPipe", 2, 8) == pytest.approx(1 / 9)
    assert S.bubble("Interleaved zero bubble", 2, 8, v=1) == pytest.approx(1 / 25)
    with pytest.raises(ValueError, match="unknown schedule"):
        S.bubble("2F2B", 2, 8)


def row(schedule="1F1B", bubbles=(0.5, 0.6), formula=0.2, unequal=0.3, micro=8,
        times=None) -> ScheduleRow:
    times = times or {("F", 0): 0.001, ("B", 0): 0.002, ("F", 1): 0.002, ("B", 1): 0.004}
    return ScheduleRow("PyTorch", schedule, micro, 2, 1, list(bubbles), formula, formula,
                       unequal, [2, 1], [2.0, 1.0], 0.0, times)


def test_departure_splits_the_gap_into_unequal_stages_and_the_rest():
    text = departure(row())
    assert "3.0 ms on stage 0 and 6.0 ms on stage 1" in text
    assert "account for 10 percentage points" in text
    assert "leaves 25 points" in text


def test_departure_says_when_stages_or_transfers_cost_nothing():
    text = departure(row(bubbles=(0.2, 0.2), unequal=0.2))
    assert "cost this order nothing measurable" in text
    assert "added no idle time" in text


def test_versus_calls_a_difference_only_outside_the_spread():
    a, b = row("Interleaved 1F1B", (0.3, 0.35)), row("1F1B", (0.5, 0.6))
    assert "less than" in versus(a, b)
    assert "more than" in versus(b, a)
    assert "within the timed steps' spread" in versus(a, row("1F1B", (0.32, 0.4)))


def test_compare_says_whether_the_measured_order_is_the_formulas():
    rows = [row("1F1B", (0.5,), 0.2), row("Interleaved 1F1B", (0.3,), 0.1)]
    assert compare(rows, 8).endswith("the measured order is the formulas' order.")
    rows = [row("1F1B", (0.3,), 0.2), row("Interleaved 1F1B", (0.5,), 0.1)]
    assert "the formulas put Interleaved 1F1B first" in compare(rows, 8)
    rows.append(row("GPipe", (0.4,), 0.2))                 # a tie for last is named
    assert "1F1B and GPipe last (20%)" in compare(rows, 8)
    assert compare(rows, 4).startswith("Fewer than two")


def synthetic_run(p: int = 2, m: int = 4) -> dict:
    """A run's JSON as the scripts write it, from 1F1B replayed on equal stages twice
    (two timed steps) with a stage's saved bytes."""
    orders = [one_f_one_b(r, p, m) for r in range(p)]
    ran = replay(orders, lambda k, s: 0.001 if k == "F" else 0.002, p)
    ranks = [{"schedule": "1F1B", "micro": m, "virtual": 1, "stages": [r],
              "steps": [ran[r], ran[r]], "times": [0.02, 0.02], "losses": [1.0],
              "saved_bytes": {str(r): 2**20}, "weight_diff": 1e-6} for r in range(p)]
    return {"framework": "PyTorch", "ranks": p, "runs": [ranks], "failed": {}}


def test_rows_read_a_run_back_and_the_figures_draw_it():
    import matplotlib
    matplotlib.use("Agg")
    from grader.lab.pipeline_schedules import rows
    from grader.lab.pipeline_schedules.figures import (comparison_figure, schedule_table,
                                                       timelines_figure)

    run = synthetic_run()
    (r,) = rows(run)
    assert r.bubbles == pytest.approx([1 / 5, 1 / 5]) and r.formula == pytest.approx(0.2)
    assert r.equal == pytest.approx(0.2) and r.unequal == pytest.approx(0.2)
    assert r.in_flight == [2, 1] and r.in_flight_bytes == [2 * 2**20, 2**20]
    table = schedule_table({"PyTorch": [r]})
    assert "1F1B" in table and max(len(line) for line in table.splitlines()) <= 100
    assert len(timelines_figure(run, micro=4).axes) == 1
    assert len(comparison_figure({"PyTorch": [r]}, micro=4).axes) == 2


def test_the_timeline_panels_share_one_time_range():
    """Review, round 3: each panel had its own x range, so a longer step looked as long
    as a shorter one."""
    import matplotlib
    matplotlib.use("Agg")
    from grader.lab.pipeline_schedules.figures import timelines_figure

    fast, slow = synthetic_run(), synthetic_run()
    orders = [one_f_one_b(r, 2, 4) for r in range(2)]
    ran = replay(orders, lambda k, s: 0.003 if k == "F" else 0.006, 2)   # 3x longer
    for r, rank in enumerate(slow["runs"][0]):
        rank.update(schedule="GPipe", steps=[ran[r], ran[r]])
    fast["runs"] += slow["runs"]
    fig = timelines_figure(fast, micro=4)
    assert len(fig.axes) == 2
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
