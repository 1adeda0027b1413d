"""fit_width: what a page prints but did not write fits an output box."""
from grader.lab.core.notes import WIDTH, fit_width


def test_long_lines_are_wrapped_under_their_indent_and_short_ones_kept():
    table = "a    b    c\n1    2    3"
    text = table + "\n  " + "word " * 40 + "\n" + "x" * 150
    out = fit_width(text)
    lines = out.splitlines()
    assert lines[:2] == table.splitlines()                  # short lines untouched
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[2].startswith("  word") and lines[3].startswith("      word")
    assert "".join(out.split()) == "".join(text.split())   # nothing lost but spaces
