"""Grading a class: ``pipeline`` (``make grade``: set-up, workers, reports), ``worker`` (one
process that claims jobs and grades them), ``item`` (one student's assignment, start to
feedback), ``ledger`` (which jobs are pending, running, done; in the gradebook's database)
and ``progress`` (the bar and the summary the instructor watches)."""
