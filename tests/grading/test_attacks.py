"""Attacks on the verdict: none may raise a score when test cells are judged outside the kernel.

Every attack is a copy of alice's assignment 1 with two WRONG answers (``time_work`` returns a
constant 20 ms: the public check passes, the hidden one fails; the experiment is not
implemented), plus a payload in an answer cell. The same submission without a payload
(``baseline``) scores 0 of 8. All notebooks are autograded in one nbgrader run with
:class:`grader.grading.judge.executor.JudgedExecute`, and, at the same time, the baseline, the
honest student and the payloads marked ``forges`` once more with the in-kernel
``GuardedExecute`` to show that those payloads are real: they raise the score there. Each attack says where the judge stops it.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from grader.grading.config import load
from grader.grading.judge.executor import JudgedExecute
from grader.grading.sandbox import crashes
from tests.grading.attacks import judge_dos
from tests.grading.nbgrader_cli import autograde_options, nbgrader

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"

HEAD = 'FRAMEWORK = "torch"\n\n\ndef time_work(torch, clock, fn, *args, warmup=1, repeats=3):\n'
WRONG_TIME = HEAD + "    return 0.02\n"
NOT_DONE = "def independent_ops_experiment(torch, clock, x, n=8):\n    raise NotImplementedError\n"
# The operation the check hands time_work is a plain function whose length is in its
# closure: an answer in the same process (grading in the kernel) can read it
SECRET = ("def _secret(fn):\n    try:\n        return dict(zip(fn.__code__.co_freevars, "
          "[c.cell_contents for c in fn.__closure__]))['seconds']\n    except Exception:\n"
          "        return None\n")
FORGED = ("from grader.checks.result import CheckResult\n"
          "_ok = lambda *a, **k: CheckResult('forged', 4, 4, 'ok')\n")


def in_body(code: str) -> str:
    """``time_work`` running ``code`` when the test calls it, then answering wrongly."""
    body = "".join(f"    {line}\n" for line in code.strip().splitlines())
    return f"{HEAD}{body}    return 0.02\n"


# name -> (time_work cell, forges in the kernel, where the judge stops it)
ATTACKS: dict[str, tuple[str, bool, str]] = {
    "redefine_grade_public": (WRONG_TIME + "grade = lambda *r: 4.0\npublic = lambda r: None\n", True,
        # the judge's namespace defines grade/public (the instructor's imports cell, run in
        # the judge); only names it lacks are looked up in the kernel
        "judge namespace"),
    "redefine_checks": (WRONG_TIME + FORGED + "import types\nchecks = types.SimpleNamespace("
        "public_time_work=_ok, public_experiment=_ok)\n"
        # the hidden block's `load` too (in the kernel it would load the course's checks)
        "import grader.grading.hidden as _h\n_h.load = lambda name: types.SimpleNamespace("
        "check_time_work=_ok, check_experiment=_ok)\n",
        True, "judge namespace"),
    "patch_support_via_sys_modules": (WRONG_TIME + "import sys\n_s = sys.modules['grader.checks.support']\n"
        "_s.grade.__code__ = (lambda *r: 4.0).__code__\n_s.public.__code__ = (lambda r: None).__code__\n",
        True,
        # sys.modules of the kernel: the judge's grader.checks.support lives in another process
        "process boundary"),
    "patch_check_functions": (WRONG_TIME + FORGED + "import grader.checks.a1_independent_ops as _m\n"
        "_m.public_time_work = _m.public_experiment = _ok\n"
        # the hidden checks, where this kernel can load them (grading in the kernel)
        "from grader.grading.hidden import load as _load\n"
        "try:\n    _h = _load('a1_independent_ops')\n"
        "    _h.check_time_work = _h.check_experiment = _ok\nexcept ImportError:\n    pass\n",
        True, "process boundary"),
    "patch_assertion_error": (WRONG_TIME + "import builtins\nclass _Quiet(Exception):\n    pass\n"
        "builtins.AssertionError = _Quiet\nget_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n",
        # nbgrader 0.9 already appends the error from the execute reply; in the judge the
        # builtins module patched is the kernel's, the failing public check raises the judge's
        False, "process boundary"),
    "patch_showtraceback": (WRONG_TIME + "ip = get_ipython()\nip.showtraceback = lambda *a, **k: None\n"
        "ip._showtraceback = lambda *a, **k: None\n",
        # nbgrader issue 1324; the judge writes the error output itself
        False, "judge writes outputs"),
    "displayhook_in_function": (in_body("import sys\nsys.displayhook = lambda value: None"), True,
        # in the kernel, the test cell's value is then never displayed, and nbgrader gives
        # full points to a test cell without output; the judge writes the execute_result
        "judge writes outputs"),
    "display_formatter_prints_4": (WRONG_TIME + "f = get_ipython().display_formatter.formatters['text/plain']\n"
        "f.for_type(int, lambda v, p, cycle: p.text('4'))\nf.for_type(float, lambda v, p, cycle: p.text('4'))\n",
        True, "judge writes outputs (repr in the judge)"),
    "fake_execute_result_from_function": (in_body("get_ipython().displayhook(4)"), True,
        # the kernel's execute_result goes out under the serve request: the judge forwards
        # only stream outputs, and streams cannot raise a score
        "only streams forwarded"),
    "print_fake_score": (in_body("print('[PASS] time_work measures device time: 4/4')\nprint(4.0)"), False,
        # a stream output never gives points, in the kernel or the judge
        "streams give no points"),
    "pre_run_cell_event": (WRONG_TIME + "get_ipython().events.register('pre_run_cell', "
        "lambda *a: get_ipython().displayhook(4))\n", True,
        # the serve request is silent (no run-cell events), and kernel results are dropped
        "only streams forwarded"),
    "import_hook_replaces_checks": (WRONG_TIME + FORGED + """import sys, importlib.abc, importlib.util
class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name in ("grader.checks.a1_independent_ops", "grader.grading.hidden"):
            return importlib.util.spec_from_loader(name, self)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.public_time_work = module.check_time_work = _ok
        module.public_experiment = module.check_experiment = _ok
        module.load = lambda name: module      # the hidden block's loader
sys.meta_path.insert(0, _Finder())
del sys.modules["grader.checks.a1_independent_ops"]
sys.modules.pop("grader.grading.hidden", None)
import grader.checks.a1_independent_ops as checks
""", True, "process boundary (the judge imports its own modules)"),
    "gc_patches_result_and_total": (WRONG_TIME + """import gc
for _o in gc.get_objects():
    if isinstance(_o, type) and _o.__name__ == "CheckResult":
        _o.passed = property(lambda self: True)
    if getattr(_o, "__name__", "") == "total" and getattr(_o, "__module__", "") == "grader.checks.result":
        _o.__code__ = (lambda results: (sum(r.max_points for r in results),) * 2).__code__
""", True, "process boundary"),
    "frame_walk_patches_the_check": (in_body("""import sys
f = sys._getframe(1)
while f is not None:
    if f.f_globals.get("__name__", "").startswith(("grader.checks", "hidden.")):
        f.f_globals["close"] = lambda *a, **k: True
    f = f.f_back"""), True,
        # the frames above the student's function in the kernel are remote.serve's
        "process boundary"),
    "lying_float": (WRONG_TIME.replace("return 0.02", "return _Liar(0.5, _secret(fn) or 0.5)")
        + SECRET + """
class _Liar(float):   # 0.5 s, but converts to the operation's own length and equals anything
    def __new__(cls, value, says):
        self = super().__new__(cls, value)
        self.says = says
        return self
    def __float__(self):
        return self.says
    def __eq__(self, other):
        return True
    def __hash__(self):
        return 0
""", True,
        # a float subclass is not data: it stays in the kernel and the judge holds a proxy
        # that has no __float__ and compares by identity
        "codec (by reference)"),
    "os_exit_after_fake_result": (in_body("print('[PASS] 4/4')\nget_ipython().displayhook(4)\n"
        "import sys, os\nsys.stdout.flush()\nos._exit(0)"), False,
        # the kernel dies under the judged cell: DeadKernelError, the pipeline's crash
        # rounds score the cell 0
        "dead kernel"),
    "private_state_of_the_checks_objects": (HEAD + """    seconds = _secret(fn)          # the operation's length, in one process
    if seconds is None:
        try:                           # the raw channel: ask the judge for __closure__ itself
            _ch = object.__getattribute__(fn, "_channel")
            _ch.request("getattr", object.__getattribute__(fn, "_handle"), name="__closure__")
        except Exception:
            pass
    return seconds if seconds is not None else 0.02
""" + SECRET, True,
        # the kernel holds a proxy of the judge's function; the judge answers no attribute
        # that starts with "_" (no __closure__, __code__, __globals__), and the simulated
        # framework keeps its machine and costs in such attributes too
        "allowlist of public attributes"),
    "tamper_with_the_channel": (WRONG_TIME + """import grader.grading.judge.channel as _r
def _evil(self, msg):
    # every answer a pickle blob, or a value type with a forged field set
    self._send({"k": "rep", "id": "k0", "to": msg["id"], "ok": True, "back": [],
                "v": {"pickle": "gASVAAAAAAAAAAA="}}, [])
_r.Channel._serve_one = _evil
""", False,
        # the judge decodes only data; a malformed answer is an error in the test cell
        "codec (refuses the answer)"),
}
# denial of service of the judge (tests/grading/attacks/judge_dos.py): each is stopped by a
# limit, which the cell's output names (LIMITS), and the honest student graded in the same
# run keeps her score
ATTACKS.update({name: (code, False, where) for name, (code, where, _) in judge_dos.PAYLOADS.items()})
LIMITS = {name: said for name, (_, _, said) in judge_dos.PAYLOADS.items() if said}
HONEST = {"alice": {"test_time_work": 4.0, "test_experiment": 4.0}}   # as graded alone


def _notebook(course: Path, student: str, time_work: str) -> None:
    nb = nbformat.read(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "time_work":
            c.source = time_work
        elif gid == "experiment":
            c.source = NOT_DONE
    out = course / "submitted" / student / A1
    out.mkdir(parents=True)
    nbformat.write(nb, out / f"{A1}.ipynb")


def _grade(course: Path, executor: type, students: list[str]) -> dict[str, dict]:
    """student -> {"score", "cells" (grade id -> score), "said" (the test cells' outputs)},
    graded by nbgrader with ``executor`` under a 30 s cell limit (the course is released)."""
    extra = autograde_options(executor, course / "trace", cell_timeout_s=30)
    t0 = time.monotonic()
    # non-zero when a kernel died: that one scores 0
    nbgrader(course, "autograde", A1, "--force", *extra, timeout=1800)
    print(f"{course.name}: {len(students)} notebooks autograded with {executor.__name__} "
          f"in {time.monotonic() - t0:.1f} s")
    from nbgrader.api import MissingEntry

    out: dict[str, dict] = {}
    with load(course).gradebook() as gb:
        for student in students:
            try:
                sub = gb.find_submission(A1, student)
                cells = {g.name: float(g.score) for nb in sub.notebooks for g in nb.grades}
                score = float(sub.score)
            except MissingEntry:
                score, cells = 0.0, {}
            graded = course / "autograded" / student / A1 / f"{A1}.ipynb"
            said = ""
            if graded.exists():
                nb = nbformat.read(graded, as_version=4)
                said = json.dumps([c.get("outputs", []) for c in nb.cells
                                   if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")])
            out[student] = {"score": score, "cells": cells, "said": said}
    return out


STUDENTS = ["baseline", *HONEST, *ATTACKS]
# In the kernel, only what its tests compare: the baseline, the honest students and the
# payloads that forge there (the others' in-kernel scores are asserted nowhere)
IN_KERNEL = ["baseline", *HONEST, *(a for a, (_, forges, _) in ATTACKS.items() if forges)]


def _course(students: list[str]) -> Path:
    course = Path(tempfile.mkdtemp(prefix="attacks-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    shutil.copytree(EXERCISES / "source" / A1, course / "source" / A1)
    assert nbgrader(course, "generate_assignment", A1, "--force").returncode == 0
    for name in students:
        if name in HONEST:
            shutil.copytree(EXERCISES / "submitted" / name / A1, course / "submitted" / name / A1)
        else:
            _notebook(course, name, WRONG_TIME if name == "baseline" else ATTACKS[name][0])
    return course


@pytest.fixture(scope="module")
def graded():
    """(judged, in the kernel): assignment 1 released once, then the two ways graded at once
    (two nbgrader runs, as test_executor.py's comparison does), each its own course."""
    from concurrent.futures import ThreadPoolExecutor

    judged = _course(STUDENTS)
    plain = Path(tempfile.mkdtemp(prefix="attacks-"))
    try:
        shutil.copytree(judged, plain, dirs_exist_ok=True)
        for name in set(STUDENTS) - set(IN_KERNEL):
            shutil.rmtree(plain / "submitted" / name)
        with ThreadPoolExecutor(2) as pool:
            ways = [pool.submit(_grade, judged, JudgedExecute, STUDENTS),
                    pool.submit(_grade, plain, crashes.GuardedExecute, IN_KERNEL)]
            results = tuple(w.result() for w in ways)
        yield results
    finally:
        shutil.rmtree(judged, ignore_errors=True)
        shutil.rmtree(plain, ignore_errors=True)


@pytest.fixture(scope="module")
def scores(graded):
    return tuple({s: r["score"] for s, r in way.items()} for way in graded)


def test_the_baseline_scores_nothing_either_way(scores):
    judged, plain = scores
    for name in judged:
        print(f"{name:<36} judged {judged[name]:g}   in the kernel "
              + (f"{plain[name]:g}" if name in plain else "(not graded there)"))
    assert judged["baseline"] == plain["baseline"] == 0.0


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_no_attack_raises_the_judged_score(scores, attack):
    judged, _ = scores
    assert judged[attack] <= judged["baseline"], f"{attack} forged {judged[attack]} points"


@pytest.mark.parametrize("attack", sorted(LIMITS))
def test_a_limit_of_the_judge_stops_it_and_the_cell_says_which(graded, attack):
    judged, _ = graded
    assert LIMITS[attack] in judged[attack]["said"], judged[attack]["said"][-2000:]
    assert judged[attack]["cells"] and all(v == 0 for v in judged[attack]["cells"].values())


@pytest.mark.parametrize("student", sorted(HONEST))
def test_honest_students_graded_beside_the_attacks_keep_their_exact_scores(graded, student):
    judged, plain = graded
    assert judged[student]["cells"] == plain[student]["cells"] == HONEST[student]


@pytest.mark.parametrize("attack", sorted(a for a, (_, forges, _) in ATTACKS.items() if forges))
def test_the_payload_is_real_it_forges_points_in_the_kernel(scores, attack):
    _, plain = scores
    assert plain[attack] > plain["baseline"], f"{attack} did not work in the kernel either"


def test_a7_message_counts_cannot_be_forged():
    """The real all_reduce under a name the stand-in does not cover, and the counts rewritten
    through the caller's frame: the rank's process has no process group to run it on and no
    counts to rewrite (the relays hold them). The stronger forger, a process group of the
    ranks' own, is stopped by running each rank alone in the sandbox (test_rank_sandbox)."""
    from tests.checks.notebooks import hidden_checks
    from tests.grading.attacks import a7_forged

    a7 = hidden_checks("a7_ring_allreduce")

    results = a7.check_ring_all_reduce(a7_forged.ring_all_reduce, "torch")
    assert sum(r.points for r in results) < 6, [r.text() for r in results]


# -- hostile submissions beside honest students (issue 15) -----------------------------------
#
# One class run grades every attack of tests/grading/attacks/hostile.py beside alice and bob,
# under the small limits of hostile.COURSE_TOML; a second run grades alice and bob alone
# (tests/grading/conftest.py's hostile_class, graded once per session).
# Every attack must be blocked with its reason recorded, and alice and bob must get exactly
# the scores (cell by cell) they get alone.

from grader.grading.submission import intake  # noqa: E402
from grader.grading.sandbox.outputs import CUT  # noqa: E402
from tests.grading.attacks import hostile  # noqa: E402


@pytest.fixture(scope="module")
def hostile_run(hostile_class):
    """tests/grading/conftest.py's class: graded once, shared with test_feedback_browser.py
    (its mallory is one more student beside alice and bob)."""
    return hostile_class


def _student(name: str) -> str:
    return {"long_id": hostile.LONG_ID, "formula_id": hostile.FORMULA_ID}.get(name, name)


@pytest.mark.parametrize("student", ["alice", "bob"])
def test_honest_students_score_exactly_as_when_graded_alone(hostile_run, student):
    run, solo, _, _ = hostile_run
    beside, alone = run.find(student, A1), solo.find(student, A1)
    assert (beside.status, beside.score, beside.max_score, beside.cells, beside.reason) == \
           (alone.status, alone.score, alone.max_score, alone.cells, alone.reason)
    assert alone.status == "graded" and alone.score == {"alice": 8, "bob": 7}[student]


@pytest.mark.parametrize("name", sorted(hostile.ATTACKS))
def test_each_attack_is_blocked_with_its_reason_recorded(hostile_run, name):
    run, _, course, _ = hostile_run
    _, status, score, words = hostile.ATTACKS[name]
    student = _student(name)
    if student in (hostile.LONG_ID, hostile.FORMULA_ID):
        student = intake.shown(student, 40)   # such an id is reported, never used as a name
    o = run.find(student, A1)
    print(name, o)
    assert (o.status, o.score, o.max_score) == (status, score, 8), o
    assert words in o.reason, o.reason
    rows = {r["student"]: r for r in csv.DictReader(open(course / "reports" / "grades.csv"))}
    assert intake.csv_safe(student) in rows


def _entries(folder: Path) -> dict[str, os.stat_result]:
    return {str(p.relative_to(folder)): p.lstat() for p in folder.rglob("*")}


def test_autograded_and_feedback_hold_only_what_the_student_submitted(hostile_run):
    import stat

    _, _, course, _ = hostile_run
    for kind, extra in (("autograded", {f"{A1}.ipynb"}), ("feedback", {f"{A1}.html"})):
        for folder in sorted((course / kind).glob(f"*/{A1}")):
            sub = course / "submitted" / folder.parent.name / A1
            mine = {rel for rel, st in _entries(sub).items()
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1} if sub.is_dir() else set()
            for rel, st in _entries(folder).items():
                if stat.S_ISDIR(st.st_mode):
                    continue
                assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, (kind, folder, rel)
                assert rel in mine | extra, (kind, folder, rel)
                if rel in mine - extra:
                    assert (folder / rel).read_bytes() == (sub / rel).read_bytes()
    links = course / "autograded" / "links" / A1
    assert sorted(p.name for p in links.iterdir()) == [f"{A1}.ipynb"]
    page = (course / "feedback" / "links" / A1 / f"{A1}.html").read_text()
    assert "Grading note" in page and "symbolic link" in page and "/etc/shadow" in page


def test_outputs_are_cut_by_bytes_in_the_notebook_and_the_feedback(hostile_run):
    _, _, course, _ = hostile_run
    for name in ("prints_3mb", "prints_10mb", "huge_header"):
        nb = course / "autograded" / name / A1 / f"{A1}.ipynb"
        page = course / "feedback" / name / A1 / f"{A1}.html"
        assert nb.stat().st_size < 2**20 + 2**18 and page.stat().st_size < 2 * 2**20, name
        assert CUT in nb.read_text()


def test_tampered_metadata_and_an_unpaired_marker_still_get_nbgraders_feedback(hostile_run):
    _, _, course, _ = hostile_run
    for name in ("tamper_ids", "tamper_types", "tamper_schema", "hidden_marker"):
        page = (course / "feedback" / name / A1 / f"{A1}.html").read_text()
        assert "could not be made" not in page and "test_experiment" in page, name


def test_a_kernel_sees_only_its_own_socket_folder(hostile_run):
    _, _, course, _ = hostile_run
    nb = nbformat.read(course / "autograded" / "ipc_b_reader" / A1 / f"{A1}.ipynb", as_version=4)
    seen = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "SOCKET FOLDER" in seen
    assert "note.txt" not in seen and "big.bin" not in seen, seen


def test_a_kernel_cannot_replace_its_sockets_with_links(hostile_run):
    """Issue 32: the socket folder is root's and read-only in the sandbox (the launcher makes
    the sockets and hands them over as descriptors)."""
    _, _, course, _ = hostile_run
    nb = nbformat.read(course / "autograded" / "ipc_link" / A1 / f"{A1}.ipynb", as_version=4)
    seen = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "SOCKETS" in seen and seen.count("k-") == 5 and "REPLACED" not in seen, seen


def test_grading_leaves_no_runtime_folder_behind(hostile_run):
    _, _, _, scratch = hostile_run
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_no_report_field_is_a_spreadsheet_formula(hostile_run):
    _, _, course, _ = hostile_run
    for name in ("grades.csv", "nbgrader_grades.csv"):
        for row in csv.reader(open(course / "reports" / name)):
            for field in row:
                assert intake.csv_safe(field) == field, (name, field)


def test_an_id_that_cannot_name_a_file_names_none(hostile_run):
    _, _, course, _ = hostile_run
    for folder in ("reports", "feedback", "autograded"):
        names = [p.name for p in (course / folder).rglob("*")]
        assert not any("x" * 70 in n or "HYPERLINK" in n for n in names), folder


def test_a_kernel_over_the_sandboxs_memory_is_stopped_by_its_control_group(hostile_run):
    from grader.grading.sandbox.bounds import Box

    box = Box.create(f"probe-{os.getpid()}", 2**30, 16)
    if box is None:
        pytest.skip("this machine gives the grader no control group: rlimits only")
    box.remove()
    o = hostile_run[0].find("k_memory", A1)
    assert "the memory limit (2.5 GB for the notebook's processes together)" in o.reason, o
