"""Checks of assignment a2_small_ops: correct answers in PyTorch and Paddle score full marks,
each typical mistake loses the points it should with the first hint it should, grading is
repeatable."""
from . import a2_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

globals().update(assignment_tests(hidden_checks("a2_small_ops"), solutions, "a2_small_ops",
                                  [("check_time_on_streams", "time_on_streams"),
                                   ("check_speedups", "stream_speedups")]))
