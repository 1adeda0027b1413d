"""The instructor pipeline around nbgrader: ``python -m grader.grading`` (``make grade``)
grades every submission in ``exercises/submitted/``.

- :mod:`.config`: ``course.toml`` read, and how each setting reaches the code that uses it;
- :mod:`.run`: grading a class (pipeline, workers, ledger, progress, one student's job);
- :mod:`.judge`: test cells judged outside the student's kernel;
- :mod:`.sandbox`: the student's kernel, isolated and bounded;
- :mod:`.submission`: a submission read as data and shown back safely;
- :mod:`.authoring`, :mod:`.student`, :mod:`.hidden`: what a course author uses (write
  nbgrader notebooks from Python, the student version, the hidden checks' loader).
"""
