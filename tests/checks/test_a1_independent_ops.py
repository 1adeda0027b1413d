"""Checks of assignment a1_independent_ops: correct answers in PyTorch and Paddle score full
marks, each typical mistake loses the points it should with the first hint it should,
grading is repeatable."""
from . import a1_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

globals().update(assignment_tests(hidden_checks("a1_independent_ops"), solutions, "a1_independent_ops",
                                  [("check_time_work", "time_work"),
                                   ("check_experiment", "independent_ops_experiment")]))


def test_a_run_that_raises_costs_only_the_parts_that_read_it():
    """Each run is scored on its own (issue 37): before, one raise scored the check 0/4."""
    from .notebooks import namespace

    a1 = hidden_checks("a1_independent_ops")
    ns = namespace("a1_independent_ops", {})
    right, fw = ns["time_work"], ns["FRAMEWORK"]

    def single_repeat_raises(*args, repeats=5, **kwargs):
        if repeats == 1:
            raise ValueError("one repeat has no median")
        return right(*args, repeats=repeats, **kwargs)
    r = a1.check_time_work(single_repeat_raises, fw)
    # the cold and busy runs (1 repeat each) are lost; the synchronized time keeps its 2
    assert r.points == 2 and r.message.startswith("a cold GPU: "), r.text()
    assert "with earlier work queued: " in "\n".join(r.details), r.text()

    calls = []

    def first_framework_raises(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first call")
        return ns["independent_ops_experiment"](*args, **kwargs)
    r = a1.check_experiment(first_framework_raises, fw)
    assert r.points == 2 and "one after another: " in r.message, r.text()
