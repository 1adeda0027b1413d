"""grader.lab.capstone.resume: a resumed run against the run that saved its checkpoint,
on made-up records (no launch): identical in the same layout, within the tolerance in
another, and the learning rates equal; the recorded restart's lines."""
from __future__ import annotations

from grader.lab import capstone

SAVER = [4.0, 3.5, 3.0, 2.8]
LR = [0.4, 0.3, 0.2, 0.1]


def launch(world: int, *runs: dict) -> dict:
    return {"world": world, "reference": SAVER, "runs": list(runs)}


def saver(layout: str = "1x1x2x2") -> dict:
    return {"layout": layout, "control": False, "start": 0, "losses": SAVER, "lr": LR,
            "resumed": None}


def resumed(layout: str, losses, lr=LR[2:], saved=("1x1x2x2", 4)) -> dict:
    return {"layout": layout, "control": False, "start": 2, "losses": losses, "lr": lr,
            "resumed": {"saved_by": {"layout": saved[0], "ranks": saved[1]},
                        "load_s": 0.1, "from": "ckpt/step-000002"}}


def test_in_the_same_layout_only_identical_losses_continue_the_run():
    last_bit = [x * (1 + 1.2e-7) for x in SAVER[2:]]
    rows = capstone.resumes([launch(4, saver(), resumed("1x1x2x2", SAVER[2:]),
                                    resumed("1x1x2x2", last_bit))])
    assert [r.same_layout for r in rows] == [True, True]
    assert rows[0].continues and rows[0].off_saver == 0.0
    assert not rows[1].continues              # one reordered sum: not the same run


def test_in_another_layout_the_tolerance_applies():
    edge = [x * (1 + 0.9 * capstone.TOLERANCE) for x in SAVER[2:]]
    over = [x * (1 + 3 * capstone.TOLERANCE) for x in SAVER[2:]]
    rows = capstone.resumes([launch(4, saver()), launch(2, resumed("1x2x1x1", edge),
                                                        resumed("1x2x1x1", over))])
    assert [(r.ranks, r.saved_ranks, r.same_layout) for r in rows] == [(2, 4, False)] * 2
    assert [r.continues for r in rows] == [True, False]


def test_a_learning_rate_not_carried_or_a_missing_saver_does_not_continue():
    rows = capstone.resumes([launch(4, saver(), resumed("1x1x2x2", SAVER[2:], lr=LR[:2]),
                                    resumed("1x1x2x2", SAVER[2:], saved=("2x2x1x1", 4)))])
    assert not rows[0].lr_carried and not rows[0].continues
    assert rows[1].off_saver is None and not rows[1].continues
    words = capstone.resume_words(rows)
    assert "the layout that saved does not continue them: its learning rates are not " \
        "the saving run's" in words
    assert "0 of the 1 runs resumed in another layout" in words
    assert capstone.resume.why_not(rows[1]) == "the run that saved is not in the records"
    assert "not found" in capstone.resume_table(rows)


def test_the_recorded_restart_in_lines():
    result = {"world": 4, "reference": SAVER, "launcher": ["rank 3 failed with exit code -9"],
              "attempts": [[[0, 4.0], [1, 3.5], [2, 3.0]], [[2, 3.0], [3, 2.8]]],
              "runs": [{"skipped": [{"name": "tmp-step-000003", "metadata": True}],
                        "resumed": {"from": "ckpt/1x2x1x2/step-000002"}}]}
    lines = capstone.elastic_lines(result).split("\n")
    assert lines[0] == "attempt 1: steps 0-2; rank 3 killed (SIGKILL) while saving step 3"
    assert "passed over tmp-step-000003 (all its files written, never committed)" in lines[2]
    assert lines[3] == "attempt 2: resumed from step-000002, steps 2-3"
    assert lines[-1].endswith("at most 0.0e+00 off one process")
