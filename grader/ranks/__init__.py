"""a7's counted ranks: a student's rank function run where every collective goes through
a trusted relay that counts and checks it (``relay``: the judge's side, ``run_ranks``;
``stub``: the rank's side, which runs the student's code in the rank sandbox).

This package serves grading, not the book: it is started by ``grader.checks`` for the
judge, and it never imports a reference answer (``exercises/hidden``) or anything of
``grader.grading`` but the rank sandbox it is launched in. See ``grader/__init__.py``
for the trust boundary.
"""
