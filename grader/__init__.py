"""Helper package for the course *Parallel Deep Learning with PyTorch and PaddlePaddle*.

Layers (see README, "The grader package"):

- :mod:`grader.lab` is what chapters and students import: devices, backend adapters,
  timing, launching ranks, timelines.
- :mod:`grader.checks` holds what exercise notebooks import: the public checks and their
  helpers (the graded checks live in the course folder, ``exercises/hidden``).
- :mod:`grader.build` builds the executed book.
"""

__version__ = "0.1.0"
