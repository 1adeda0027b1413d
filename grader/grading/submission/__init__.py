"""What a student made, treated as data: read in, and shown back without running it.

``intake`` (a submission's files read within limits, never following a link, staged for
nbgrader), ``feedback`` (feedback pages that never show a hidden test's code),
``sanitize`` (student HTML stripped of script, plus a Content-Security-Policy) and
``formgrader_guard`` (the Jupyter server extension that sends that policy)."""
