"""Writes the sample submissions of assignments 5-8 into ``exercises/submitted/``:
``python -m tests.checks.samples_a5_a8`` from the repository root (after changing a source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in; the answers come from the ``aN_solutions``
modules beside this file. ``test_samples_a5_a8.py`` checks the scores they get."""
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from grader.grading.authoring import fill_solutions, write
from tests.checks import a6_solutions as s6, a7_solutions as s7, a8_solutions as s8

ROOT = Path(__file__).resolve().parents[2]
SUB = ROOT / "exercises" / "submitted"
COURSE = Path()  # the temporary course directory, set by main()


def src(fn, name, body_prefix=""):
    text = inspect.getsource(fn)
    text = re.sub(r"^def \w+\(", f"def {name}(", text, count=1)
    return body_prefix + text


def ref(a, **changes):
    """The reference answers without nbgrader's markers, with some cells changed."""
    from tests.checks.notebooks import reference
    base = {k: "\n".join(l for l in v.splitlines() if "### BEGIN SOLUTION" not in l
                         and "### END SOLUTION" not in l) for k, v in reference(a).items()}
    return {**base, **changes}


def released(a):
    return nbformat.read(COURSE / "release" / a / f"{a}.ipynb", as_version=4)



def released_course(assignment: str) -> Path:
    """A temporary course holding ``assignment`` released (nbgrader generate_assignment),
    set as :data:`COURSE`, the folder :func:`put` reads the released notebooks from."""
    global COURSE
    COURSE = course = Path(tempfile.mkdtemp(prefix="course-samples-"))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "exercises" / "hidden", course / "hidden")
    shutil.copytree(ROOT / "exercises" / "source" / assignment, course / "source" / assignment)
    subprocess.run(["nbgrader", "generate_assignment", assignment, "--force"], cwd=course,
                   env=env, check=True, capture_output=True)
    return course

def put(student, a, answers):
    """``answers`` replace whole answer cells; a cell's ``FRAMEWORK = ...`` line, above its
    function in the released notebook, stays where an answer does not set it."""
    nb = released(a)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        head = c.source.split("def ", 1)[0]
        if gid in answers and "FRAMEWORK" in head and "FRAMEWORK" not in answers[gid]:
            answers = {**answers, gid: head + answers[gid]}
    nb = fill_solutions(nb, answers)
    write(nb, SUB / student / a / f"{a}.ipynb")


def main() -> None:
    global COURSE
    COURSE = Path(tempfile.mkdtemp(prefix="course-samples-"))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", COURSE)
    shutil.copytree(ROOT / "exercises" / "hidden", COURSE / "hidden")
    for a in ("a6_data_parallel", "a7_ring_allreduce", "a8_placements"):   # a5: samples_a1_a5
        shutil.copytree(ROOT / "exercises" / "source" / a, COURSE / "source" / a)
        subprocess.run(["nbgrader", "generate_assignment", a, "--force"], cwd=COURSE, env=env,
                       check=True, capture_output=True)
    # alice: correct, and written differently from the reference
    put("alice", "a6_data_parallel", {
        "scatter": src(s6.scatter_by_hand, "scatter"),
        "replicate": "import copy\n\n" + src(s6.replicate_deepcopy, "replicate"),
        "parallel_apply": "from concurrent.futures import ThreadPoolExecutor\n\n" + src(s6.parallel_apply_pool, "parallel_apply"),
        "gather": src(s6.gather_concat, "gather"),
        "reduce_gradients": src(s6.reduce_sum_then_divide, "reduce_gradients")})
    put("alice", "a7_ring_allreduce", {"ring_all_reduce": src(s7.isend_views, "ring_all_reduce")})
    put("alice", "a8_placements", {
        "link_bytes": src(s8.links_by_collectives, "link_bytes"),
        "choose_order": src(s8.order_by_counting, "choose_order").replace(
            "links_by_collectives", "link_bytes")})

    # bob: partly correct
    put("bob", "a6_data_parallel", ref("a6_data_parallel",   # one mistake: a plain mean of uneven chunks
        reduce_gradients=src(s6.reduce_plain_mean, "reduce_gradients")))
    put("bob", "a7_ring_allreduce", {"ring_all_reduce": src(s7.no_all_gather, "ring_all_reduce")})
    put("bob", "a8_placements", ref("a8_placements",         # one mistake: no backward communication
        link_bytes=src(s8.links_forward_only, "link_bytes")))

    # carol: broken in different ways
    put("carol", "a6_data_parallel", {"scatter": "import os\n\ndef scatter(batch, n):\n    os._exit(1)   # kills the kernel"})
    put("carol", "a7_ring_allreduce", {"ring_all_reduce": src(s7.deadlock, "ring_all_reduce")})
    # a8: a right prediction, but the student edited one test cell and deleted the other;
    # nbgrader puts both back (add_missing_cells) and grades them as released
    nb = fill_solutions(released("a8_placements"), {
        "link_bytes": src(s8.links_by_collectives, "link_bytes")})
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "test_links":
            c.source = "print('all tests pass')  # edited by the student"
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_order"]
    write(nb, SUB / "carol" / "a8_placements" / "a8_placements.ipynb")
    shutil.rmtree(COURSE, ignore_errors=True)
    print("sample submissions written to", SUB)


if __name__ == "__main__":
    main()
