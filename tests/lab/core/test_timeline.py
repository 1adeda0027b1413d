import pytest

from grader.lab.core.timeline import Timeline
from grader.lab.core.workers import TaskRecord


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


# --- a profiler's Chrome trace ---------------------------------------------------------

def _trace():
    return {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::matmul", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 101.0, "dur": 48.0},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 120.0, "dur": 200.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 90.0, "dur": 20.0},
        {"ph": "X", "cat": "user_annotation", "name": "run", "ts": 95.0, "dur": 60.0},
        {"ph": "M", "cat": "cpu_op", "name": "thread_name"},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 130.0},
        {}]}


def test_a_chrome_trace_becomes_rows_of_seconds_with_kinds():
    tl = Timeline.from_chrome_trace(_trace(), "t", rows={"cpu_op": "host", "kernel": "gpu",
                                                         "gpu_memcpy": "gpu copies"})
    assert sorted(tl.rows) == ["gpu", "gpu copies", "host"]
    assert len(tl.intervals) == 4  # the annotation, metadata and instant events left out
    mm = next(i for i in tl.intervals if i.label == "aten::mm")
    assert tl.start() == 0.0  # seconds since the first event drawn (the copy, at 90 us)
    assert mm.start == pytest.approx(11e-6) and mm.duration == pytest.approx(48e-6)
    kinds = {i.row: i.kind for i in tl.intervals}
    assert kinds == {"host": "compute", "gpu": "compute", "gpu copies": "copy"}
    assert tl.overlap("gpu", "gpu copies") == pytest.approx(0.0)
    assert tl.overlap("host", "gpu") == pytest.approx(30e-6)


def test_a_chrome_trace_is_read_from_a_path_or_json_text(tmp_path):
    import json

    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace()))
    a = Timeline.from_chrome_trace(path)
    b = Timeline.from_chrome_trace(str(path))
    c = Timeline.from_chrome_trace(json.dumps(_trace()))
    assert a.intervals == b.intervals == c.intervals
    assert sorted(a.rows) == ["cpu_op", "gpu_memcpy", "kernel", "user_annotation"]
    assert {i.kind for i in a.intervals if i.row == "user_annotation"} == {"other"}


def test_a_trace_without_the_asked_categories_names_the_ones_it_has():
    with pytest.raises(ValueError, match=r"no complete events of \['Kernel'\].*cpu_op"):
        Timeline.from_chrome_trace(_trace(), rows={"Kernel": "gpu"})


def test_labels_are_written_on_intervals_wide_enough_to_hold_them():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = Timeline("labels")
    tl.add("cpu", 0.0, 0.9, label="a long operator")
    tl.add("cpu", 0.9, 0.901, label="tiny")
    ax = tl.plot(labels=True)
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["a long operator"]
    plt.close(ax.figure)
    assert len(tl.plot().texts) == 0
    plt.close("all")


def test_only_the_outermost_of_nested_intervals_is_labelled():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = Timeline.from_chrome_trace({"traceEvents": [
        {"ph": "X", "cat": "Operator", "name": "matmul dygraph[15.36 ms]", "ts": 0, "dur": 900},
        {"ph": "X", "cat": "Operator", "name": "matmul kernel", "ts": 10, "dur": 800},
        {"ph": "X", "cat": "Operator", "name": "scale dygraph[96.1 us]", "ts": 900, "dur": 100}]})
    assert [i.label for i in tl.intervals] == ["matmul dygraph", "matmul kernel",
                                              "scale dygraph"]
    ax = tl.plot(labels=True)
    texts = [t.get_text() for t in ax.texts]
    assert texts[0] == "matmul dygraph" and len(texts) == 2
    assert texts[1] == "scale dyg…"  # 10% of the axis holds about 10 small characters
    plt.close("all")


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
