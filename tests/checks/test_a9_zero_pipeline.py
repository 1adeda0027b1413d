"""Assignment 9's checks: ZeRO's memory accounting and a 1F1B schedule on a unit clock
(no processes, no framework: fast)."""
import nbformat
import pytest

from grader.checks import a9_zero_pipeline as a9_public
from grader.lab import planner
from tests.checks import a9_solutions as sol
from tests.checks.notebooks import ROOT, hidden_checks, namespace, reference
from tests.checks.test_samples_a5_a8 import answers

a9 = hidden_checks("a9_zero_pipeline")      # exercises/hidden
A = "a9_zero_pipeline"


def notebook_functions(answers_=None):
    ns = namespace(A, answers_ or {})
    return ns["zero_bytes"], ns["one_f_one_b"]


def test_the_notebooks_reference_scores_full_marks():
    assert [r.points for r in a9.check_all(*notebook_functions())] == [5, 5]


@pytest.mark.parametrize("fn", [sol.zero_by_table, sol.zero_padded])
def test_other_correct_accountings_score_full_marks(fn):
    assert a9.check_zero_bytes(fn).points == 5


@pytest.mark.parametrize("fn", [sol.schedule_pytorch_style, sol.schedule_greedy])
def test_other_correct_schedules_score_full_marks(fn):
    assert a9.check_schedule(fn).points == 5


@pytest.mark.parametrize("fn, lost, named", [
    (sol.zero_stage1_splits_grads, 1, "ZeRO-1 splits only the optimizer state"),
    (sol.zero_stage2_splits_params, 1, "ZeRO-2 splits the gradients and the optimizer"),
    (sol.zero_adam_hard_coded, 1, "use optimizer_values"),
    (sol.zero_ranks_minus_one, 3, "divide by ranks, not ranks - 1"),
    (sol.zero_values_not_bytes, 5, "multiply the values by bytes_per_value"),
])
def test_each_accounting_mistake_loses_its_points_and_is_named(fn, lost, named):
    r = a9.check_zero_bytes(fn)
    assert r.points == 5 - lost
    assert named in r.hint


@pytest.mark.parametrize("fn, lost, named", [
    (sol.schedule_gpipe, 2, "that is GPipe"),
    (sol.schedule_long_warmup, 2, "one forward too many"),
    (sol.schedule_no_warmup, 2, "without the warm-up forwards"),
    (sol.schedule_backward_first, 5, "only after its own forward"),
    # right wherever micro >= stages - 1; with 4 stages and 2 micro-batches it runs F2
    (sol.schedule_uncapped_warmup, 1, "which do not exist with 2 micro-batches"),
])
def test_each_schedule_mistake_loses_its_points_and_is_named(fn, lost, named):
    r = a9.check_schedule(fn)
    assert r.points == 5 - lost
    assert named in r.hint


def test_wrong_shapes_get_a_clear_message_not_a_crash():
    assert a9.check_zero_bytes(sol.zero_wrong_keys).points == 0
    assert "keys" in a9.check_zero_bytes(sol.zero_wrong_keys).message
    r = a9.check_schedule(lambda stages, micro: [["F0"]])
    assert r.points == 0 and "stages need" in r.message


def test_the_released_stubs_fail_the_public_checks():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert not a9_public.public_zero_bytes(stub).passed
    assert not a9_public.public_one_f_one_b(stub).passed


def test_the_unit_clock_gives_the_bubble_formula_for_1f1b_and_gpipe():
    for p, m in a9.SCHEDULE_CASES:
        for schedule in (a9.one_f_one_b(p, m), sol.schedule_gpipe(p, m)):
            span, _ = a9.unit_clock(a9_public.normalise_schedule(schedule, p), p, m)
            busy = m * (a9.F_TIME + a9.B_TIME)
            assert 1 - busy / span == pytest.approx(planner.bubble_fraction(p, m))


def test_the_accounting_agrees_with_the_planner_where_the_chapters_tools_follow_zero():
    """The chapter's planner prices the gradients and optimizer state of every stage, and
    the parameters of stages 0 and 1, as ZeRO does; a9 asks for ZeRO's own table."""
    tiny = planner.Transformer(vocab=128, width=64, heads=4, blocks=4, seq=32, batch=16)
    for ranks in (2, 4):
        gpus = planner.with_devices(planner.PRESETS["8 GPUs NVLink"], ranks)
        for stage in range(4):
            plan = planner.Plan(dp=ranks, zero=stage)
            held = planner.predict_plan(tiny, plan, gpus).memory_terms
            want = a9.zero_bytes(tiny.params, ranks, stage)
            kinds = ("params", "grads", "optimizer") if stage < 2 else ("grads", "optimizer")
            assert {k: held[k] for k in kinds} == pytest.approx({k: want[k] for k in kinds})


def _zero_bytes_from_the_planner(n_params, ranks, stage, bytes_per_value=4,
                                 optimizer_values=2):
    """What a student might try: the planner's memory for the smallest transformer whose
    parameter count is nearest n_params (width 1: 3 x vocab + 24 parameters)."""
    model = planner.Transformer(vocab=max(1, round((n_params - 24) / 3)), width=1,
                                heads=1, blocks=1, seq=1, batch=ranks,
                                itemsize=bytes_per_value, opt_states=optimizer_values)
    gpus = planner.with_devices(planner.PRESETS["8 GPUs NVLink"], ranks)
    plan = planner.Plan(dp=ranks, zero=stage) if ranks > 1 else planner.Plan()
    held = planner.predict_plan(model, plan, gpus).memory_terms
    return {k: held[k] for k in ("params", "grads", "optimizer")}


def test_the_planner_does_not_hand_over_zeros_table():
    """The planner has no function of ZeRO's table: its memory is a model's, and it
    prices the parameters of stages 2 and 3 as FSDP holds them (the gathered model
    beside the shards; the shard and two gathered units), so an answer built on it
    scores only stage 0 and stage 1, what the chapter's table states. (Its sizes part is
    lost too: the planner prices no 8-byte values (``rates.py``, 0ae857b) and raises on
    that case, which costs that part alone, named with the error.)"""
    assert not any("zero" in n.lower() and "memory" in n.lower() for n in dir(planner))
    r = a9.check_zero_bytes(_zero_bytes_from_the_planner)
    assert r.points == 2, r
    assert "stage 2" in r.message
    assert "bytes_per_value and optimizer_values: _zero_bytes_from_the_planner raised " \
           "ValueError: no precision stores values in 8 bytes" in "\n".join(r.details), r.text()


def _importable_callables():
    """Every function and class (private ones too) of the modules near a9's subject that
    a student's kernel can import: a9's public checks and what all checks share, the
    planner, the sharding chapter's chores. (The other assignments' check modules are
    about other subjects, and some build large inputs from any integers.)"""
    import importlib
    import inspect
    import pkgutil

    import grader.checks
    import grader.lab.planner

    names = [i.name for pkg in (grader.checks, grader.lab.planner)
             for i in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
             if not i.name.startswith("grader.checks.a") or ".a9_" in i.name]
    names += ["grader.checks", "grader.lab.planner", "grader.lab.sharding.measure", "grader.lab.sharding.tables",
              "grader.lab.sharding.figures", "grader.lab.sharding.explorer"]
    for name in names:
        module = importlib.import_module(name)
        for n, obj in vars(module).items():
            if (inspect.isfunction(obj) or inspect.isclass(obj)) \
                    and getattr(obj, "__module__", "") == name:
                yield f"{name}.{n}", obj


def test_no_importable_function_of_the_course_answers_a9():
    """Called as zero_bytes or as one_f_one_b, none of them scores a point beyond what
    a9's hidden checks give an answer that raises."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found, tried = [], 0
    for name, fn in _importable_callables():
        tried += 1
        try:
            memory = a9.check_zero_bytes(fn).points
        except Exception:      # noqa: BLE001 - a crash is no answer
            memory = 0
        try:
            schedule = a9.check_schedule(fn).points
        except Exception:      # noqa: BLE001
            schedule = 0
        if memory or schedule:
            found.append((name, memory, schedule))
        plt.close("all")
    assert tried > 40
    assert not found, found
    # the same probe finds an answer where there is one: the hidden module's own
    assert a9.check_zero_bytes(a9.zero_bytes).points == 5
    assert a9.check_schedule(a9.one_f_one_b).points == 5


def test_the_same_submission_gets_the_same_score_ten_times():
    fns = notebook_functions({"zero_bytes": reference(A)["zero_bytes"]})
    scores = {tuple(r.points for r in a9.check_all(*fns)) for _ in range(10)}
    assert scores == {(5, 5)}


@pytest.mark.parametrize("student, expected", [("alice", 10), ("bob", 7), ("carol", 0)])
def test_sample_submissions_score_as_documented(student, expected):
    ns = namespace(A, answers(student, A))
    assert sum(r.points for r in a9.check_all(ns["zero_bytes"], ns["one_f_one_b"])) == expected


def test_carols_sample_leaves_the_schedule_as_released():
    nb = nbformat.read(ROOT / "exercises" / "submitted" / "carol" / A / f"{A}.ipynb", 4)
    cell = next(c for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "one_f_one_b")
    assert "NotImplementedError" in cell.source


def test_an_error_in_one_branch_costs_only_the_parts_whose_cases_call_it():
    """Each call is scored on its own (issue 37): before, one raise anywhere scored 0/5."""
    def zero_stage3_raises(n_params, ranks, stage, bytes_per_value=4, optimizer_values=2):
        if stage == 3:
            raise NotImplementedError("stage 3")
        return a9.zero_bytes(n_params, ranks, stage, bytes_per_value, optimizer_values)
    r = a9.check_zero_bytes(zero_stage3_raises)
    assert r.points == 4 and r.message.startswith("stage 3: "), r.text()
    assert "zero_bytes(216576, 2, 3)" in r.expected and "4 of its 4 calls failed" in r.seen

    def schedule_raises_when_few_micro_batches(stages, micro):
        if micro < stages:
            raise ValueError("fewer micro-batches than stages")
        return a9.one_f_one_b(stages, micro)
    r = a9.check_schedule(schedule_raises_when_few_micro_batches)
    # the orders of the other cases run, within memory and time: only "runs" (1) is lost
    assert r.points == 4 and r.message.startswith("one_f_one_b(3, 2): "), r.text()
    assert "fewer micro-batches than stages" in r.message and "2 of 6 calls failed" in r.seen
