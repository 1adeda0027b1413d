import pytest

from grader.lab.timeline import Timeline
from grader.lab.workers import TaskRecord


def test_overlap_of_two_rows():
    tl = Timeline()
    tl.add("a", 0.0, 2.0)
    tl.add("a", 3.0, 4.0)
    tl.add("b", 1.0, 3.5)
    assert tl.overlap("a", "b") == pytest.approx(1.5)
    assert tl.busy_time("a") == pytest.approx(3.0)
    assert tl.span() == pytest.approx(4.0)


def test_overlap_between_kinds_of_one_row():
    tl = Timeline()
    tl.add("gpu:0", 0, 2, "compute")
    tl.add("gpu:0", 1, 3, "copy")
    assert tl.overlap("gpu:0", "gpu:0", ["compute"], ["copy"]) == pytest.approx(1.0)


def test_records_become_seconds():
    tl = Timeline()
    tl.add_records("w", [TaskRecord("x", "compute", 1_000_000_000, 3_000_000_000)])
    assert tl.intervals[0].duration == pytest.approx(2.0)


def test_interval_ending_before_start_is_rejected():
    with pytest.raises(ValueError, match="ends"):
        Timeline().add("a", 2.0, 1.0)


def test_plot_draws_one_row_per_device():
    import matplotlib
    matplotlib.use("Agg")
    tl = Timeline("t")
    tl.add("gpu:0", 0, 1)
    tl.add("gpu:1", 0.5, 1.5, "copy")
    ax = tl.plot()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["gpu:0", "gpu:1"]
    assert len(ax.collections) == 2


class _FakeEvent:
    """What PyTorch's and Paddle's timing events offer: elapsed_time in milliseconds."""

    def __init__(self, ms):
        self.ms = ms

    def elapsed_time(self, other):
        return other.ms - self.ms


def test_a_timeline_from_device_events_is_in_seconds_after_the_origin():
    origin = _FakeEvent(100.0)
    marks = [("compute", _FakeEvent(100.0), _FakeEvent(102.0)),
             ("copy", _FakeEvent(101.0), _FakeEvent(104.0), "copy", "copy 0"),
             ("copy", _FakeEvent(104.0), _FakeEvent(105.0), "copy")]
    tl = Timeline.from_events(marks, origin, "t")
    assert tl.rows == ["compute", "copy"]
    assert tl.busy("compute") == [(0.0, 0.002)]
    assert tl.intervals[1].kind == "copy" and tl.intervals[1].label == "copy 0"
    assert (tl.intervals[2].kind, tl.intervals[2].label) == ("copy", "")
    assert tl.overlap("compute", "copy") == pytest.approx(0.001)
