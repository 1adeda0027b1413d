"""The instructor's hidden checks and reference answers, one module per assignment.

``hidden/aN_<name>.py`` grades assignment ``aN``: the ``check_*`` functions a test cell's
hidden block calls, and whatever reference they compare with. This folder belongs to the
course (next to ``nbgrader_config.py``), not to the ``grader`` package a student's kernel
imports: it is not on a kernel's import path and not mounted in the grading sandbox. A
hidden test block imports a module with ``grader.grading.hidden.load("aN_<name>")``; the
judge (nbgrader's process) finds this folder through nbgrader's course directory. What a
notebook may use in the student's kernel (public checks, the model, helpers) stays in
``grader/checks/aN_<name>.py``. See exercises/AUTHORING.md.
"""
