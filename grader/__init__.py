"""Helper package for the course *Parallel Deep Learning with PyTorch and PaddlePaddle*.

What the book uses (see README, "The grader package" and "Layout"):

- :mod:`grader.lab`: what chapters import. ``lab/core/`` is the machinery every page
  shares (devices, workers, ranks, timing, timelines, GPU-cell records); each page with
  helpers of its own has a subpackage named after it (``lab/data_parallel/``,
  ``lab/auto_parallel/``, ``lab/sharding/``, ...); ``lab/planner/`` is the cost model and
  search that several chapters grow. Nothing in ``grader.lab`` imports ``grader.grading``.
- :mod:`grader.build`, :mod:`grader.book_ext`, :mod:`grader.gpu_check`: the book build.

What the exercises and their grading use, and the trust boundary between them:

- :mod:`grader.checks`: what a student's notebook imports (public checks, the models an
  assignment trains). It holds no reference answer: the graded checks and the answers are
  the course's, in ``exercises/hidden``, loaded only by the judge.
- :mod:`grader.sim` (simulated GPUs behind the frameworks' API) and :mod:`grader.ranks`
  (a7's ranks, whose collectives go through counted relays) are handed to, or run, a
  student's code. They run the student's code and so must never import a reference answer
  (``exercises/hidden``, ``grader.grading.hidden``) or the judge.
- :mod:`grader.grading`: the instructor's pipeline (``make grade``). ``grading/sandbox``
  runs the student's code (the kernel and a7's ranks, isolated and bounded); the judge
  (``grading/judge``) runs the hidden checks outside it and talks to it only through the
  bounded wire format of :mod:`grader.wire`.

``tests/test_layout.py`` walks the imports and checks these rules.
"""

__version__ = "0.1.0"
