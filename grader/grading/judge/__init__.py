"""Verdicts students cannot forge: test cells run in a judge, outside the student's kernel.

``executor`` (:class:`~grader.grading.judge.executor.JudgedExecute`, nbgrader's executor),
``process`` (the judge of one notebook, in a process of its own), ``cells`` (one cell's
source run as IPython would), ``channel`` (calls between the judge and the kernel over one
socket, data only), ``proxies`` (each side's stand-ins for the other's objects) and
``inplace`` (what a callee changed in place, copied back)."""
