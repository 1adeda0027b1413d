"""The planner calculator shows numbers even where no widget can run."""
import re

from grader.lab import planner as P
from grader.lab.auto_parallel.widgets import calculator, degree_table


def test_degree_table_has_one_row_per_degree_split_and_names_the_best():
    c = P.PRESETS["8 GPUs NVLink"]
    text = degree_table(1024, 2, 256, c)
    rows = [line.split() for line in text.splitlines() if re.match(r" *\d+ +\d+  ", line)]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(1, 8), (2, 4), (4, 2), (8, 1)]
    best, _ = P.best_strategy([1024] * 3, 256, c)
    assert text.splitlines()[-1] == f"best: {best.strategy}"


def test_calculator_prints_the_default_table_before_the_widget(capsys):
    c = P.PRESETS["8 GPUs PCIe"]
    calculator(c, width=512, layers=2, batch=64)
    out = capsys.readouterr().out
    assert "static rendering" in out and degree_table(512, 2, 64, c) in out


def test_in_the_book_build_the_calculator_renders_its_table_and_no_live_widget(capsys, monkeypatch):
    from grader.lab.planner import PRESETS
    from grader.lab.auto_parallel.widgets import calculator

    monkeypatch.setenv("COURSE_BOOK_BUILD", "1")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a))
    assert calculator(next(iter(PRESETS.values()))) is None
    out = capsys.readouterr().out
    assert "best:" in out and "runs in JupyterLab" in out
    assert shown == []
