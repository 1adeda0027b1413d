"""Test cells judged in nbgrader's process (grader.grading.judge.executor): the same verdicts as in the
kernel for honest submissions, the same outputs' shapes, and limits that still hold."""
from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest

from grader.grading.config import Limits, load
from grader.grading.judge import executor
from grader.grading.judge.channel import Channel
from grader.grading.judge.executor import CellNamespace, JudgedExecute, run_cell_source
from grader.grading.sandbox import crashes
from tests.grading.nbgrader_cli import autograde_options, nbgrader

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"


def test_a_cell_runs_as_in_ipython_value_streams_and_errors():
    ns: dict = {}
    streams, value, error = run_cell_source("x = 2\nprint('hi')\nimport sys\n"
                                            "print('warn', file=sys.stderr)\nx * 2.5", ns)
    assert (value, error) == (5.0, None) and ns["x"] == 2
    assert [(name, text) for _, name, text in streams] == [("stdout", "hi"), ("stdout", "\n"),
                                                         ("stderr", "warn"), ("stderr", "\n")]
    assert run_cell_source("3;", {})[1] is None                       # ';' hides the value
    assert run_cell_source("y = 3", {})[1] is None                    # no expression last
    _, _, error = run_cell_source("assert 1 == 2, 'nope'", {})
    assert isinstance(error, AssertionError) and str(error) == "nope"
    out = executor._error_output(error)
    assert out.ename == "AssertionError" and out.evalue == "nope"
    assert not any("grading/judge/" in line for line in out.traceback)      # no judge frames
    assert isinstance(run_cell_source("def (", {})[2], SyntaxError)


def test_only_the_cells_own_threads_write_into_the_cell(capsys):
    """Another thread of the grading process (a worker's heartbeat printing a database error)
    must not put a stderr line into a student's test cell: that would cost the cell."""
    go, done = threading.Event(), threading.Event()

    def heartbeat():
        go.wait(5)
        print("database hiccup", file=sys.stderr)
        done.set()

    threading.Thread(target=heartbeat, daemon=True).start()
    streams, _, error = run_cell_source("print('own')\n_go.set()\n_done.wait(5)", {"_go": go, "_done": done})
    assert error is None and done.is_set()
    assert "".join(t for _, _, t in streams) == "own\n"
    assert "database hiccup" in capsys.readouterr().err


def test_names_the_judge_lacks_come_from_the_kernel_and_builtins_never_do():
    a, b = socket.socketpair()
    kernel_ns = {"time_work": lambda: 1, "FRAMEWORK": "paddle", "len": "student's len",
                 "grade": "student's grade"}
    kernel = Channel(b, "k", namespace=kernel_ns)
    threading.Thread(target=kernel.serve_main, daemon=True).start()
    ch = Channel(a, "j")
    ch.deadline = time.monotonic() + 30
    try:
        ns = CellNamespace({"__builtins__": __builtins__, "grade": "the judge's grade"}, ch)
        _, value, error = run_cell_source(
            "(grade, len([1]), globals().get('FRAMEWORK', 'torch'), globals().get('NOPE', 'x'), time_work())", ns)
        assert error is None and value == ("the judge's grade", 1, "paddle", "x", 1)
        _, _, error = run_cell_source("undefined_anywhere", ns)
        assert isinstance(error, NameError)
    finally:
        ch.close()
        kernel.close()


def test_the_autograde_config_puts_judged_execute_in_nbgraders_chain_under_the_limits(tmp_path):
    c = crashes.autograde_config(Limits(cell_timeout_s=7, output_mb=1.0, memory_gb=1.5),
                                 JudgedExecute, tmp_path / "trace", [(6, "cell 7")])
    chain = c.Autograde.autograde_preprocessors
    assert JudgedExecute in chain and crashes.GuardedExecute not in chain
    assert issubclass(JudgedExecute, crashes.GuardedExecute)
    # the settings reach the judged executor: the cell's time limit, the trace, the skip
    judged = JudgedExecute(config=c)
    assert (judged.timeout, judged.trace_file, judged.skip_cells, judged.output_bytes) == (
        7, str(tmp_path / "trace"), "6", 2**20)
    # and the job's memory limit reaches the judge's control group (test_process.py)
    assert judged.judge_memory_bytes == int(1.5 * 2**30)


# ---- every answer of the check suites, through the channel ----------------------------------

SUITES = {
    "a1_independent_ops": [("check_time_work", "time_work"), ("check_experiment", "independent_ops_experiment")],
    "a2_small_ops": [("check_time_on_streams", "time_on_streams"), ("check_speedups", "stream_speedups")],
    "a3_compute_comm": [("check_sequential", "sequential"), ("check_overlapped", "overlapped")],
    "a4_profile_trace": [("check_trace_with_events", "trace_with_events"),
                         ("check_chrome_overlap", "overlap_from_chrome_trace")],
    "a5_dependencies": [("check_result", "run_dag"), ("check_devices_used", "run_dag"),
                        ("check_dependencies", "run_dag"), ("check_faster", "run_dag")],
}


def _answer_sets():
    import importlib

    for a in SUITES:
        sol = importlib.import_module(f"tests.checks.{a[:2]}_solutions")
        yield a, "reference", {}
        for name, answers in sol.CORRECT.items():
            yield a, f"correct:{name}", answers
        for name, (answers, *_) in sol.WRONG.items():
            if name not in getattr(sol, "READS_WALL_CLOCK", {}):
                yield a, f"wrong:{name}", answers


@pytest.mark.parametrize("assignment, name, answers", list(_answer_sets()),
                         ids=[f"{a[:2]}-{n}" for a, n, _ in _answer_sets()])
def test_every_suite_answer_gets_the_same_verdict_through_the_channel(assignment, name, answers):
    """tests/checks' correct answers (PyTorch and Paddle) and typical mistakes, their functions
    living on the kernel side of a channel (as when judged), the simulated framework on the
    judge's: the same points and messages as in one process. Every call the answer makes on
    the simulated torch/paddle (attributes, operators on tensors, `with` on a stream context,
    events' elapsed_time as plain floats) crosses the channel."""
    from tests.checks.notebooks import hidden_checks, namespace

    checks = hidden_checks(assignment)
    ns = namespace(assignment, answers)
    framework = ns["FRAMEWORK"]
    direct = [getattr(checks, c)(ns[f], framework) for c, f in SUITES[assignment]]
    a, b = socket.socketpair()
    kernel = Channel(b, "k", namespace=namespace(assignment, answers))
    threading.Thread(target=kernel.serve_main, daemon=True).start()
    ch = Channel(a, "j")
    ch.deadline = time.monotonic() + 120
    try:
        judged = [getattr(checks, c)(ch.request("global", name=f), ch.request("global", name="FRAMEWORK"))
                  for c, f in SUITES[assignment]]
    finally:
        ch.close()
        kernel.close()
    assert [(r.points, r.message) for r in judged] == [(r.points, r.message) for r in direct]


def _through_channel(namespace: dict, fn):
    """``fn(proxy_of)``, where ``proxy_of(name)`` is the judge's proxy of ``namespace[name]``
    living on the kernel side of a channel."""
    a, b = socket.socketpair()
    kernel = Channel(b, "k", namespace=namespace)
    threading.Thread(target=kernel.serve_main, daemon=True).start()
    ch = Channel(a, "j")
    ch.deadline = time.monotonic() + 300
    try:
        return fn(lambda name: ch.request("global", name=name))
    finally:
        ch.close()
        kernel.close()


def _a8_cases():
    from tests.checks import a8_solutions

    for name in sorted(n for n in vars(a8_solutions) if n.startswith(("links_", "order_"))):
        yield "a8_placements", "check_links" if name.startswith("links") else "check_orders", a8_solutions, name


@pytest.mark.parametrize("assignment, check, module, name", list(_a8_cases()),
                         ids=[f"{a[:2]}-{n}" for a, _, _, n in _a8_cases()])
def test_a8_answers_get_the_same_verdict_through_the_channel(assignment, check, module, name):
    from tests.checks.notebooks import hidden_checks

    checks = hidden_checks(assignment)
    as_list = lambda r: r if isinstance(r, list) else [r]  # noqa: E731
    direct = as_list(getattr(checks, check)(getattr(module, name)))
    judged = _through_channel(vars(module), lambda get: as_list(getattr(checks, check)(get(name))))
    assert [(r.points, r.message) for r in judged] == [(r.points, r.message) for r in direct]


def _a9_cases():
    from tests.checks import a9_solutions

    for name in sorted(n for n in vars(a9_solutions) if n.startswith(("zero_", "schedule_"))):
        yield ("a9_zero_pipeline", "check_zero_bytes" if name.startswith("zero") else "check_schedule",
               a9_solutions, name)


@pytest.mark.parametrize("assignment, check, module, name", list(_a9_cases()),
                         ids=[f"{a[:2]}-{n}" for a, _, _, n in _a9_cases()])
def test_a9_answers_get_the_same_verdict_through_the_channel(assignment, check, module, name):
    from tests.checks.notebooks import hidden_checks

    checks = hidden_checks(assignment)
    direct = getattr(checks, check)(getattr(module, name))
    judged = _through_channel(vars(module), lambda get: getattr(checks, check)(get(name)))
    assert (judged.points, judged.message, judged.seen) == (direct.points, direct.message, direct.seen)


def _a6_cases():
    from tests.checks import a6_solutions as sol

    yield pytest.param(sol.REFERENCE, "torch", id="reference")
    yield pytest.param(sol.BY_HAND, "torch", id="by_hand")
    yield pytest.param(sol.STACKED, "torch", id="stacked")
    for bad in ("replicate_shared", "replicate_same_tensors", "parallel_apply_sequential",
                "parallel_apply_reversed", "gather_reversed", "reduce_summed", "reduce_plain_mean",
                "reduce_twice", "scatter_drops"):
        piece = bad.split("_")[0].replace("parallel", "parallel_apply").replace("reduce", "reduce_gradients")
        yield pytest.param(sol.with_(**{piece: getattr(sol, bad)}), "torch", id=bad)
    yield pytest.param(sol.PADDLE, "paddle", id="paddle")
    # replicas that share storage without sharing objects (a view per replica)
    yield pytest.param(sol.with_(replicate=_replicate_detached), "torch", id="replicate_detached")


def _replicate_detached(params, n):
    return [{k: v.detach() for k, v in params.items()} for _ in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("pieces, framework", list(_a6_cases()))
def test_a6_pieces_get_the_same_verdict_through_the_channel(pieces, framework):
    """Identity (shared replicas), in-place changes, concurrent callbacks (parallel_apply's
    probe) and tensors of both frameworks, as the judge sees them."""
    from tests.checks.notebooks import hidden_checks

    a6 = hidden_checks("a6_data_parallel")
    direct = a6.check_all(pieces, framework)
    ns = {f"piece_{k}": v for k, v in pieces.items()}
    judged = _through_channel(ns, lambda get: a6.check_all({k: get(f"piece_{k}") for k in pieces}, framework))
    assert [(r.points, r.message) for r in judged] == [(r.points, r.message) for r in direct]


# ---- end to end, through nbgrader ----------------------------------------------------------


def _cells(course: Path, assignment: str) -> dict[str, dict[str, float]]:
    with load(course).gradebook() as gb:
        return {sub.student.id: {g.name: float(g.score) for nb in sub.notebooks for g in nb.grades}
                for sub in gb.find_assignment(assignment).submissions}


def _errors(course: Path, assignment: str) -> dict[str, str]:
    """Each autograded notebook's first error output (for a failure's message)."""
    import nbformat
    found = {}
    for nb_path in sorted((course / "autograded").glob(f"*/{assignment}/*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        for cell in nb.cells:
            err = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"),
                       None)
            if err:
                found[nb_path.parts[-3]] = f"{err.get('ename')}: {str(err.get('evalue'))[:300]}"
                break
    return found


def _course(assignments: list[str], students: list[str]) -> Path:
    course = Path(tempfile.mkdtemp(prefix="judge-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    for a in assignments:
        shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
        for s in students:
            if (EXERCISES / "submitted" / s / a).is_dir():
                shutil.copytree(EXERCISES / "submitted" / s / a, course / "submitted" / s / a)
    return course


# a10's cells each start two rank launches (public and hidden checks): its judged path is
# graded in tests/grading/test_a10_graded.py, so it is not graded twice more here
ALL = sorted(p.name for p in (EXERCISES / "source").iterdir()
             if p.is_dir() and p.name != "a10_tensor_parallel")


def _frameworks(student: str) -> dict[str, str]:
    """assignment -> the framework the student's answers choose (``FRAMEWORK = ...``)."""
    out = {}
    for a in ALL:
        path = EXERCISES / "submitted" / student / a / f"{a}.ipynb"
        if path.exists():
            nb = nbformat.read(path, as_version=4)
            for c in nb.cells:
                for fw in ("paddle", "torch"):
                    if f'FRAMEWORK = "{fw}"' in c.source:
                        out.setdefault(a, fw)
    return out


@pytest.mark.slow
def test_the_sample_submissions_score_the_same_judged_and_in_the_kernel():
    """alice and bob on every assignment, graded judged and in the kernel, cell by cell;
    alice answers some assignments in Paddle and others in PyTorch, so both frameworks'
    answers cross the channel, and bob makes one typical mistake per assignment. The
    assignments are released once and the course copied; then one nbgrader run per way
    grades every assignment (``"*"``), the two ways at once, so the judged run's judge
    processes all come from one fork server. (carol's kernel-ending answers are left to the
    crash tests, test_limits_hold_for_judged_cells...: here they only failed their notebook
    both ways, at the cost of a kernel start each.)"""
    from concurrent.futures import ThreadPoolExecutor

    frameworks = _frameworks("alice")
    assert set(frameworks.values()) == {"torch", "paddle"}, frameworks
    plain = _course(ALL, ["alice", "bob"])
    judged = Path(tempfile.mkdtemp(prefix="judge-"))
    try:
        assert nbgrader(plain, "generate_assignment", "*", "--force").returncode == 0
        shutil.copytree(plain, judged, dirs_exist_ok=True)
        # The two ways share two cores: a cell limit well above what any cell needs
        # (scores are compared here, not times; the limits have their own tests).
        extra = {judged: autograde_options(JudgedExecute, judged / "trace", cell_timeout_s=300),
                 plain: autograde_options(crashes.GuardedExecute, plain / "trace",
                                          cell_timeout_s=300)}
        with ThreadPoolExecutor(2) as pool:
            # non-zero when a kernel died: that notebook scores 0 both ways
            list(pool.map(lambda c: nbgrader(c, "autograde", "*", "--force", *extra[c]),
                          (judged, plain)))
        for a in ALL:
            want, got = _cells(plain, a), _cells(judged, a)
            assert got == want, (f"{a}: judged {got} != in the kernel {want}; errors "
                                 f"judged: {_errors(judged, a)}; in the kernel: "
                                 f"{_errors(plain, a)}")
            assert want["alice"] and all(s == 0 or s for s in want["alice"].values())
        for fw in ("torch", "paddle"):   # each framework's honest answers earn points
            assert any(sum(_cells(judged, a)["alice"].values()) > 0
                       for a, f in frameworks.items() if f == fw), fw
        # the figures test_pipeline.py expects of the in-kernel pipeline
        assert sum(_cells(judged, A1)["alice"].values()) == 8
        assert sum(_cells(judged, A1)["bob"].values()) == 7
    finally:
        shutil.rmtree(plain, ignore_errors=True)
        shutil.rmtree(judged, ignore_errors=True)


def _student(course: Path, name: str, answers: dict[str, str]) -> None:
    nb = nbformat.read(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in answers:
            c.source = answers[c.metadata["nbgrader"]["grade_id"]]
    out = course / "submitted" / name / A1
    out.mkdir(parents=True)
    nbformat.write(nb, out / f"{A1}.ipynb")


@pytest.mark.slow
def test_limits_hold_for_judged_cells_a_timeout_and_a_kernel_that_dies():
    course = _course([A1], [])
    try:
        loop = "def independent_ops_experiment(*args, **kwargs):\n    while True:\n        pass\n"
        dies = "import os\ndef independent_ops_experiment(*args, **kwargs):\n    os._exit(1)\n"
        _student(course, "loops", {"experiment": loop})
        _student(course, "dies", {"experiment": dies})
        assert nbgrader(course, "generate_assignment", A1, "--force").returncode == 0
        trace = course / "trace"
        t0 = time.monotonic()
        nbgrader(course, "autograde", A1, "--force", "--student", "loops",
                  *autograde_options(JudgedExecute, trace, cell_timeout_s=8))
        assert time.monotonic() - t0 < 120
        assert _cells(course, A1)["loops"] == {"test_time_work": 4.0, "test_experiment": 0.0}
        nb = json.loads((course / "autograded" / "loops" / A1 / f"{A1}.ipynb").read_text())
        test = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_experiment")
        assert [o.get("ename") for o in test["outputs"] if o["output_type"] == "error"] == ["CellTimeoutError"]

        # the kernel dies inside the judged test cell: nbgrader drops the notebook, the trace
        # names the cell, and the next round (as the pipeline runs it) scores it 0
        first = nbgrader(course, "autograde", A1, "--force", "--student", "dies",
                          *autograde_options(JudgedExecute, trace))
        assert "DeadKernelError" in first.stdout + first.stderr
        dead = crashes.dead_cell(trace)
        assert dead == (7, "cell 8 (grade id 'test_experiment')")
        again = nbgrader(course, "autograde", A1, "--force", "--student", "dies",
                          *autograde_options(JudgedExecute, trace, [dead]))
        assert again.returncode == 0, again.stdout[-3000:]
        assert _cells(course, A1)["dies"] == {"test_time_work": 4.0, "test_experiment": 0.0}
    finally:
        shutil.rmtree(course, ignore_errors=True)
