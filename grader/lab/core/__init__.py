"""The machinery every page uses, in one place: which devices an experiment gets
(``devices``, ``backends``), CPU worker processes and ranks (``workers``, ``launch``, with
their shared subprocess plumbing in ``procs``), timing (``bench``), timelines
(``timeline``), program graphs (``graph``), thread settings (``threads``), GPU-only cells
recorded on a GPU machine (``gpucells``) and quieting Paddle's launcher logs
(``paddle_log``). ``workloads`` and ``dist_examples`` are small importable functions that
workers and ranks run by name in tests and benchmarks.

Nothing here imports a chapter's own package, ``grader.grading`` or the exercises'
machinery (``grader.sim``, ``grader.ranks``); chapters mostly reach it through
``grader.lab`` (``get_devices``, ``Benchmark``, ``launch``, ``Timeline``, ...).
"""
