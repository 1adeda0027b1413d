"""A grading worker leaves rfc3987_syntax out (its Lark grammar, built when jsonschema is
imported, cost about a second of CPU per worker) and still validates notebooks."""
import subprocess
import sys

PROBE = """
import runpy, sys
sys.argv = ["worker", "--help"]
try:
    runpy.run_module("grader.grading.run.worker", run_name="__main__")
except SystemExit:
    pass
import jsonschema, nbformat
from nbformat.v4 import new_code_cell, new_notebook
nbformat.validate(new_notebook(cells=[new_code_cell("x = 1")]))
bad = new_notebook(cells=[new_code_cell("x = 1")])
bad.cells[0]["outputs"] = [{"output_type": "nonsense"}]
try:
    nbformat.validate(bad)
    refused = False
except nbformat.ValidationError:
    refused = True
print(sys.modules.get("rfc3987_syntax", "absent") is None, "jsonschema" in sys.modules, refused)
"""


def test_the_worker_runs_without_rfc3987_syntax_and_still_validates_notebooks():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["True", "True", "True"]      # after its --help


def test_importing_the_worker_module_leaves_it_alone():
    """Only the worker's own process drops it: a process that imports the module (a test,
    the pipeline) keeps jsonschema as installed."""
    probe = ("import sys; import grader.grading.run.worker; "
             "print(sys.modules.get('rfc3987_syntax', 'absent') is not None)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"
