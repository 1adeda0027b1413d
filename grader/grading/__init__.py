"""The instructor pipeline around nbgrader: ``python -m grader.grading`` (``make grade``)
grades every submission in ``exercises/submitted/`` (see :mod:`grader.grading.pipeline`);
:mod:`grader.grading.authoring` writes nbgrader notebooks from Python."""
