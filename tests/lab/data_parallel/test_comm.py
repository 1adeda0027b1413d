"""The figures of what data-parallel training communicates draw what they are given."""
import matplotlib

matplotlib.use("Agg")

from grader.lab.data_parallel.comm import plot_allreduces, plot_buckets  # noqa: E402

SIZES = {"w1": 2**20, "b1": 4096, "w2": 2**20, "b2": 1024}


def _boxes(ax):
    """Unfilled rectangles: one outline per bucket."""
    return [p for p in ax.patches if not p.get_fill()]


def test_each_bucket_is_one_outline_as_wide_as_its_parameters():
    rows = [("one bucket", [["b2", "w2", "b1", "w1"]]),
            ("two buckets", [["b2", "w2"], ["b1", "w1"]])]
    ax = plot_buckets(rows, SIZES)
    widths = sorted(round(b.get_width() * 2**20) for b in _boxes(ax))
    assert widths == sorted([sum(SIZES.values()), 2**20 + 1024, 2**20 + 4096])
    segments = [p for p in ax.patches if p.get_fill()]
    assert len(segments) == 8                     # every parameter drawn once per row


def test_allreduce_bars_show_the_counts_given():
    runs = [{"label": "accum 4", "backwards": 64, "allreduces": 64},
            {"label": "accum 4, no_sync", "backwards": 64, "allreduces": 16}]
    ax = plot_allreduces(runs)
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == [16, 64, 64, 64]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["accum 4", "accum 4, no_sync"]
