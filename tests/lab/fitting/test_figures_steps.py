"""fitting's "Bytes held for backward" figure: runs of very different durations share one
axis (review, round 3: five curves squashed on a 0-1400 ms axis)."""
import matplotlib

matplotlib.use("Agg")

from grader.lab.fitting.figures import step_figure  # noqa: E402


def test_each_run_spans_the_whole_axis_whatever_its_duration():
    fast = [(0.0, 0), (0.01, 2**20), (0.02, 0)]          # 20 ms
    slow = [(5.0, 0), (5.7, 2**21), (6.4, 0)]            # 1.4 s
    fig = step_figure({"fast": fast, "slow": slow})
    for line in fig.axes[0].get_lines():
        xs = list(line.get_xdata())
        assert xs[0] == 0 and xs[-1] == 1, (line.get_label(), xs)
    import matplotlib.pyplot as plt
    plt.close(fig)
