"""The chapter's figures draw what they are given."""
import matplotlib

matplotlib.use("Agg")

from grader.lab.auto_parallel import figures as F  # noqa: E402
from grader.lab import planner as P  # noqa: E402
from tests.lab.auto_parallel.test_measure import runs, sweep  # noqa: E402
from grader.lab.auto_parallel import measure as M  # noqa: E402


def test_each_figure_has_a_panel_per_framework_and_a_series_per_collective():
    fit = M.fit_sweep(sweep())
    fig = F.sweep_figure({"PyTorch": fit, "Paddle": fit})
    assert len(fig.axes) == 2
    assert len(fig.axes[0].get_legend().get_texts()) == 4    # 2 ops x 2 group sizes
    cluster, _ = M.calibrate(sweep(), runs())
    fig = F.prediction_figure({"PyTorch": M.compare(runs(), cluster)})
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[1] == "1x4:R,R,R *" and len(labels) == 4
    assert len(F.placements_figure().axes) == 2
    assert P.PRESETS  # the module imports the planner it draws
