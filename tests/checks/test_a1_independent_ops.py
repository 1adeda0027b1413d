"""Checks of assignment a1_independent_ops: correct answers in PyTorch and Paddle score full
marks, each typical mistake loses the points it should with the first hint it should,
grading is repeatable."""
from . import a1_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

globals().update(assignment_tests(hidden_checks("a1_independent_ops"), solutions, "a1_independent_ops",
                                  [("check_time_work", "time_work"),
                                   ("check_experiment", "independent_ops_experiment")]))
