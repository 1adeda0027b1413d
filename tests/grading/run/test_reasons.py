"""Every lost point has its reason in the report, in full (grader.grading.run.item)."""
from grader.checks.result import CheckResult
from grader.checks.support import result
from grader.grading.run.item import _said, lost_points


def test_a_partly_scored_check_gives_its_reason_with_hint_and_every_lost_part():
    lost = result("check_sums", 5, [
        (2, True, "the first case", "1", "1", ""),
        (2, False, "the second case, which ends with a long sentence that a report must not cut",
         "3", "4", "add the last element too"),
        (1, False, "the third case", "0", "raised", "handle an empty list")], "all right")
    passed = CheckResult("check_other", 2, 2, "all right")
    public = CheckResult("public_sums", 0, 1, "quick check failed")
    text = "\n".join([public.text(points=False), lost.text(), passed.text()])
    notes = lost_points(text, "test_sums")
    assert len(notes) == 1, notes
    note = notes[0]
    assert note.startswith("test cell test_sums: check_sums 2/5: the second case, which ends "
                           "with a long sentence that a report must not cut")
    assert "hint: add the last element too" in note
    assert "also: the third case" in note and "handle an empty list" in note


def test_a_students_error_text_is_cut_at_a_word_not_inside_one():
    said = _said("word " * 200, 60)
    assert said.endswith(" [...]") and all(w == "word" for w in said[:-6].split())
    assert _said("short  message\n") == "short message"
