"""A notebook keeps at most output_mb of output, counted in bytes; what decides a score is
never dropped (grader/grading/sandbox/outputs.py)."""
from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from grader.grading.sandbox.outputs import CUT, Budget, BoundOutputs, size_of

LIMIT = 10_000


def _nb(*cells):
    return new_notebook(cells=[new_code_cell("x", outputs=list(outs)) for outs in cells])


def test_a_stream_over_the_budget_is_cut_in_bytes_with_a_note():
    one_line = "y" * 1_000_000          # one line: nbgrader's LimitOutput counts lines
    nb, _ = BoundOutputs(output_bytes=LIMIT).preprocess(
        _nb([new_output("stream", name="stdout", text=one_line)]), {})
    assert len(nbformat.writes(nb).encode()) < 2 * LIMIT
    texts = [o.text for o in nb.cells[0].outputs]
    assert texts[0].startswith("yyy") and CUT in texts[-1]


def test_errors_results_and_stderr_are_kept_when_the_budget_is_spent():
    spent = new_output("stream", name="stdout", text="y" * 20_000)
    error = new_output("error", ename="AssertionError", evalue="e" * 50_000, traceback=["t" * 50_000])
    result = new_output("execute_result", data={"text/plain": "4", "image/png": "p" * 50_000},
                        execution_count=1)
    stderr = new_output("stream", name="stderr", text="warning " * 10_000)
    nb, _ = BoundOutputs(output_bytes=LIMIT).preprocess(
        _nb([spent], [error], [result], [stderr],
            [new_output("display_data", data={"text/plain": "d" * 50_000})]), {})
    kinds = [[o.output_type + ("/" + o.name if o.output_type == "stream" else "")
              for o in c.outputs] for c in nb.cells]
    assert kinds[1][0] == "error" and nb.cells[1].outputs[0].ename == "AssertionError"
    assert kinds[2][0] == "execute_result" and nb.cells[2].outputs[0].data == {"text/plain": "4"}
    assert kinds[3][0] == "stream/stderr" and nb.cells[3].outputs[0].text   # a score of 0 stays 0
    assert kinds[4] == ["stream/stdout"] and CUT in nb.cells[4].outputs[0].text  # left out, noted
    assert len(nbformat.writes(nb).encode()) < 30_000


def test_what_fits_is_kept_as_it_was():
    outs = [new_output("stream", name="stdout", text="hello\n"),
            new_output("display_data", data={"text/plain": "x"}, metadata={"a": 1})]
    nb = _nb(outs)
    before = nbformat.writes(nb)
    nb, _ = BoundOutputs(output_bytes=LIMIT).preprocess(nb, {})
    assert nbformat.writes(nb) == before


def test_a_budget_is_spent_message_by_message():
    b = Budget(1000)
    assert b.content("stream", {"name": "stdout", "text": "a" * 500}, 0) is not None
    cut = b.content("stream", {"name": "stdout", "text": "b" * 5000}, 0)
    assert cut is not None and len(cut["text"]) < 1000 and 0 in b.cut_cells
    assert b.content("display_data", {"data": {"text/plain": "c" * 100}}, 1) is None
    assert b.content("error", {"ename": "E", "evalue": "v" * 9000, "traceback": []}, 2)["evalue"]
    assert size_of({"a": "é"}) == len('{"a": "é"}'.encode())
