"""The student's kernel, isolated and bounded.

``setup`` (the grading process's side: kernelspec, job folders, how a kernel ended),
``kernel`` (the trusted launcher: bubblewrap + setpriv + prlimit), ``rank`` (one student
rank of a collective check, alone in the sandbox), ``bounds`` (control group, folder watch),
``crashes`` (nbgrader's executor, guarded: a cell that ends the kernel costs only that
cell), ``outputs`` (what a notebook keeps of its output), ``workdir`` (what the kernel left
in its folder) and ``procs`` (finding and ending a worker's processes).

Nothing is imported here: the launcher (``python -m grader.grading.sandbox.kernel``) runs
for every kernel start and imports only the standard library."""
