"""Checks of assignment a2_small_ops: correct answers score full marks, each typical mistake loses
the points it should with the message it should, grading is repeatable."""
from . import a2_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

checks = hidden_checks("a2_small_ops")   # exercises/hidden

globals().update(assignment_tests(checks, solutions, "a2_small_ops", [("check_time_on_streams", "time_on_streams"),("check_speedups", "stream_speedups")]))
