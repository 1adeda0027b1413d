"""Writes the sample submissions of assignments 1-5 into ``exercises/submitted/``:
``python -m tests.checks.samples_a1_a5`` from the repository root (after changing a source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in from the ``aN_solutions`` modules beside this file:

- alice: correct, written differently from the reference (a2 and a4 in Paddle);
- bob: one typical mistake per assignment;
- carol: broken (a1 ends the kernel, a2 is not a notebook, a3 and a5 are missing, a4 has a
  deleted and an edited test cell around right answers).

``test_samples_a1_a5.py`` checks the scores they get."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from grader.grading.authoring import fill_solutions, write
from tests.checks import (a1_solutions as s1, a2_solutions as s2, a3_solutions as s3,
                          a4_solutions as s4, a5_solutions as s5)

ROOT = Path(__file__).resolve().parents[2]
SUB = ROOT / "exercises" / "submitted"
MINE = ["a1_independent_ops", "a2_small_ops", "a3_compute_comm", "a4_profile_trace",
        "a5_dependencies"]

ALICE = {"a1_independent_ops": s1.CORRECT["torch_clock_then_events"],
         "a2_small_ops": s2.CORRECT["paddle_blocks"],
         "a3_compute_comm": s3.CORRECT["torch_pinned_buffers"],
         "a4_profile_trace": s4.CORRECT["paddle_named_streams"],
         "a5_dependencies": s5.CORRECT["torch_z_on_device_1"]}
BOB = {"a1_independent_ops": "no_warmup", "a2_small_ops": "wrong_stream_index",
       "a3_compute_comm": "copies_on_the_products_stream",
       "a4_profile_trace": "copy_events_on_the_products_stream",
       "a5_dependencies": "waits_after_each"}
BOB_SOLUTIONS = {"a1_independent_ops": s1, "a2_small_ops": s2, "a3_compute_comm": s3,
                 "a4_profile_trace": s4, "a5_dependencies": s5}


def reference(a: str) -> dict[str, str]:
    """The reference answers without nbgrader's markers."""
    from tests.checks.notebooks import reference as ref
    return {k: "\n".join(line for line in v.splitlines() if "### BEGIN SOLUTION" not in line
                         and "### END SOLUTION" not in line) for k, v in ref(a).items()}


def main() -> None:
    course = Path(tempfile.mkdtemp(prefix="course-samples-"))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", course)
    for a in MINE:
        shutil.copytree(ROOT / "exercises" / "source" / a, course / "source" / a)
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", a, "--force"],
                       cwd=course, env=env, check=True, capture_output=True)

    def released(a: str) -> nbformat.NotebookNode:
        return nbformat.read(course / "release" / a / f"{a}.ipynb", as_version=4)

    def put(student: str, a: str, answers: dict[str, str]) -> None:
        write(fill_solutions(released(a), answers), SUB / student / a / f"{a}.ipynb")

    for a in MINE:
        put("alice", a, ALICE[a])
        # bob: the reference, but for the cells of one typical mistake
        put("bob", a, {**reference(a), **BOB_SOLUTIONS[a].WRONG[BOB[a]][0]})

    # carol a1: time_work ends the kernel ('my notebook kept crashing'); her experiment is
    # right but needs time_work
    crash = ('FRAMEWORK = "torch"\n\n\ndef time_work(torch, clock, fn, *args, warmup=1, repeats=3):\n'
             "    import os\n    os._exit(1)  # 'my notebook kept crashing'\n")
    put("carol", "a1_independent_ops", {"time_work": crash,
                                        "experiment": reference("a1_independent_ops")["experiment"]})
    # carol a2: valid JSON, but not a notebook (no metadata)
    nb = json.loads(json.dumps(fill_solutions(released("a2_small_ops"), reference("a2_small_ops"))))
    del nb["metadata"]
    path = SUB / "carol" / "a2_small_ops" / "a2_small_ops.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1) + "\n")
    # carol a4: right answers, but she deleted one test cell and edited the other
    nb = fill_solutions(released("a4_profile_trace"), ALICE["a4_profile_trace"])
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "test_chrome":
            c.source = "print('all tests pass')  # edited by the student"
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_trace"]
    write(nb, SUB / "carol" / "a4_profile_trace" / "a4_profile_trace.ipynb")
    # carol a3 and a5: never submitted
    for a in ("a3_compute_comm", "a5_dependencies"):
        shutil.rmtree(SUB / "carol" / a, ignore_errors=True)
    shutil.rmtree(course, ignore_errors=True)
    print("sample submissions of a1-a5 written to", SUB)


if __name__ == "__main__":
    main()
