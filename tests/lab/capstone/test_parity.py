"""grader.lab.capstone: the loss-parity check the page and the script tests apply, on
made-up curves (no launch)."""
from __future__ import annotations

import pytest

from grader.lab import capstone

REF = [4.0, 3.5, 3.0]


def record(*runs) -> dict:
    return {"world": 4, "reference": REF,
            "runs": [{"layout": t, "control": c, "losses": l} for t, c, l in runs]}


def test_a_reordered_sum_passes_and_a_double_average_fails():
    last_bit = [x * (1 + 1.2e-7) for x in REF]          # float32's last bit
    averaged_twice = [4.0, 3.9, 3.8]                    # steps a quarter too short
    rows = capstone.parity(record(("1x4x1x1", False, last_bit),
                                  ("1x4x1x1", True, averaged_twice)))
    assert rows[0].within and rows[0].worst == pytest.approx(1.2e-7)
    assert not rows[1].within and rows[1].control


def test_the_tolerance_is_relative():
    edge = [x * (1 + 0.99 * capstone.TOLERANCE) for x in REF]
    over = [x * (1 + 2 * capstone.TOLERANCE) for x in REF]
    rows = capstone.parity(record(("a", False, edge), ("b", False, over)))
    assert [r.within for r in rows] == [True, False]


def test_curves_of_another_length_are_refused():
    with pytest.raises(ValueError, match="one loss per step"):
        capstone.worst_relative(REF[:2], REF)
    with pytest.raises(ValueError):
        capstone.worst_relative([], [])


def test_the_words_name_what_left_the_curve_and_a_control_that_did_not():
    rows = capstone.parity(record(("1x2x2x1", False, REF), ("2x2x1x1", False, [4, 3, 2]),
                                  ("1x4x1x1", True, REF)))
    words = capstone.parity_words(rows)
    assert "1 of the 2 layouts" in words and "2x2x1x1" in words
    assert "failed to catch it" in words           # a control that stays on the curve
    ok = capstone.parity_words(capstone.parity(record(("1x4x1x1", True, [4, 3, 2]))))
    assert "as it must" in ok


def test_a_drift_shown_on_purpose_is_kept_out_of_the_parity_and_listed_apart():
    rec = record(("4x1x1x1", False, REF))
    rec["runs"].append({"layout": "4x1x1x1", "views": True, "losses": [4.4, 3.5, 3.0]})
    assert [r.layout for r in capstone.parity(rec)] == ["4x1x1x1"]
    ((layout, first, worst),) = capstone.drifts(rec)
    assert layout == "4x1x1x1" and first == pytest.approx(0.1) and worst == first
