"""Checks of assignment a3_compute_comm: correct answers in PyTorch and Paddle score full
marks, each typical mistake loses the points it should with the first hint it should,
grading is repeatable."""
from . import a3_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

globals().update(assignment_tests(hidden_checks("a3_compute_comm"), solutions, "a3_compute_comm",
                                  [("check_sequential", "sequential"),
                                   ("check_overlapped", "overlapped")]))
