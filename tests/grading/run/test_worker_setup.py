"""A grading worker's process set-up for less CPU per job: it leaves rfc3987_syntax out (its
Lark grammar, built when jsonschema is imported, cost about a second of CPU per worker) and
still validates notebooks; its nbgrader Gradebooks share one engine per database, and still
read and write the same rows (a forked feedback child included). One process runs the
worker's set-up as ``python -m grader.grading.run.worker`` does, then both probes."""
import os
import subprocess
import sys

import pytest

PROBE = """
import os, runpy, sys
db = sys.argv[1]
sys.argv = ["worker", "--help"]
try:
    runpy.run_module("grader.grading.run.worker", run_name="__main__")
except SystemExit:
    pass
print("=== imports")
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

print("=== engines")
from nbgrader.api import Gradebook
from grader.grading.run.worker import share_gradebook_engines
url = "sqlite:///" + db
engines = share_gradebook_engines()
with Gradebook(url, "c") as gb:
    gb.add_student("ann")
    first = gb.engine
with Gradebook(url, "c") as gb:
    print(gb.engine is first, [s.id for s in gb.students])
pid = os.fork()
if pid == 0:                         # as a feedback page's child: its own connections
    code = 1
    try:
        with Gradebook(url, "c") as gb:
            gb.add_student("bob")
        code = 0
    finally:
        os._exit(code)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
with Gradebook(url, "c") as gb:
    print(sorted(s.id for s in gb.students), len(engines))
with Gradebook(url + ".2", "c") as gb:
    print(gb.engine is not first, [s.id for s in gb.students], len(engines))
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    db = tmp_path_factory.mktemp("worker-setup") / "gradebook.db"
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    out = subprocess.run([sys.executable, "-c", PROBE, str(db)], capture_output=True, text=True,
                         timeout=300, env=env)           # PATH: nbgrader runs alembic
    assert out.returncode == 0, out.stderr[-2000:]
    parts = out.stdout.split("=== ")
    return {p.split("\n", 1)[0]: p.split("\n")[1:-1] for p in parts[1:]}


def test_the_worker_runs_without_rfc3987_syntax_and_still_validates_notebooks(probe):
    assert probe["imports"] == ["True True True"]     # blocked, jsonschema there, bad refused


def test_gradebooks_share_one_engine_per_database_and_still_see_every_write(probe):
    assert probe["engines"] == [
        "True ['ann']",            # the second Gradebook: the same engine, the first's row
        "0",                       # a forked child wrote through a pool of its own
        "['ann', 'bob'] 1",        # and the parent reads it; still one engine
        "True [] 2",               # another database: another engine, its own rows
    ]


def test_importing_the_worker_module_leaves_it_alone():
    """Only the worker's own process drops it: a process that imports the module (a test,
    the pipeline) keeps jsonschema as installed."""
    probe = ("import sys; import grader.grading.run.worker; "
             "print(sys.modules.get('rfc3987_syntax', 'absent') is not None)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"
