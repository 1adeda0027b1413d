"""Checks of assignment a3_compute_comm: correct answers score full marks, each typical mistake loses
the points it should with the message it should, grading is repeatable."""
from . import a3_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

checks = hidden_checks("a3_compute_comm")   # exercises/hidden

globals().update(assignment_tests(checks, solutions, "a3_compute_comm", [("check_sequential", "sequential"),("check_overlapped", "overlapped")]))
