"""Checks of assignment a1_independent_ops: correct answers score full marks, each typical mistake loses
the points it should with the message it should, grading is repeatable."""
from . import a1_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

checks = hidden_checks("a1_independent_ops")   # exercises/hidden

globals().update(assignment_tests(checks, solutions, "a1_independent_ops", [("check_time_work", "time_work"),("check_experiment", "independent_ops_experiment")]))
