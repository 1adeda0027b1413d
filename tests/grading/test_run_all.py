"""A student's Run All in a real kernel (issue 35): a failing quick check prints its message
to stderr, with no traceback, and the rest of the notebook still runs; nbgrader still
counts that test cell as failed (what ``nbgrader validate`` reports)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbgrader.utils import determine_grade

from grader.grading.student import student_version
from tests.checks.notebooks import reference

SOURCE = Path(__file__).resolve().parents[2] / "exercises" / "source"
A9 = "a9_zero_pipeline"


def _gid(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def test_run_all_goes_past_a_failing_quick_check_to_the_next_task():
    """The student version of a9 with task 1 left as released and task 2 answered: Run All
    stops only at the notebook's own last example (it calls the unfinished zero_bytes),
    not at task 1's test cell. Before, the quick check's AssertionError stopped Run All
    there, with a traceback, and task 2 never ran."""
    nb = student_version(nbformat.read(SOURCE / A9 / f"{A9}.ipynb", as_version=4))
    for c in nb.cells:
        if _gid(c) == "one_f_one_b":
            c.source = reference(A9)["one_f_one_b"]
    client = NotebookClient(nb, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(SOURCE / A9)}})
    with pytest.raises(CellExecutionError) as stopped:
        client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "zero_bytes(7_000_000_000, 8, stage)" in code[-1].source
    assert "NotImplementedError" in str(stopped.value)
    assert all(c.execution_count for c in code), "Run All stopped before the last cell"
    by_id = {_gid(c): c for c in code if _gid(c)}
    test_zero, test_schedule = by_id["test_zero"], by_id["test_schedule"]
    kinds = [(o.output_type, o.get("name")) for o in test_zero.outputs]
    assert kinds == [("stream", "stderr")], kinds                   # no error, no traceback
    message = test_zero.outputs[0].text
    assert "[FAIL] a9 (public)" in message and "not implemented" in message, message
    assert "Traceback" not in message
    assert "[PASS] a9 (public)" in "".join(o.get("text", "") for o in test_schedule.outputs)
    # what validate reads: task 1's test cell fails, task 2's passes
    assert determine_grade(test_zero)[0] == 0
    assert determine_grade(test_schedule)[0] == test_schedule.metadata.nbgrader["points"]
