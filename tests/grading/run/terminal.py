"""Start a command as a terminal would, whatever state the test process is in.

A process started with ``SIGINT`` ignored keeps it ignored (POSIX, and Python installs no
``KeyboardInterrupt`` handler then), and a blocked ``SIGINT`` stays blocked across ``exec``:
a test that presses Ctrl-C on its child must not depend on what some library did to the
pytest process before (seen in a full run: the Ctrl-C tests' children graded everything and
exited 0 instead of 130).
"""
from __future__ import annotations

import signal


def as_at_a_terminal() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: ``SIGINT`` delivered and handled by default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
