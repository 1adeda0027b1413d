"""nbgrader configuration of the course (this directory is the course directory).

Run nbgrader from here, or pass ``--CourseDirectory.root=exercises``; nothing is read from
``~/.jupyter``. ``make grade`` (``python -m grader.grading``) wraps autograde with limits
and records a grade for every submission, even one that crashes; see exercises/AUTHORING.md.
"""
import os

c = get_config()  # noqa: F821 (injected by traitlets)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# The course id, the gradebook URL and the limits live in course.toml (read by
# grader/grading/config.py, whose docstring says how each setting travels), so that nbgrader
# run by hand, the formgrader and `make grade` all use the same gradebook and limits.
from grader.grading.config import load as _load_grading  # noqa: E402

try:
    _grading = _load_grading(c.CourseDirectory.root)
    # A private overlay named in course.toml ([overlay] folder) replaces source notebooks of
    # the same name: nbgrader (release, autograde, the hub's formgrader) reads a folder of
    # links to the overlay's or the public assignment (grader/grading/overlay.py).
    from grader.grading.overlay import view as _source_view
    c.CourseDirectory.source_directory = _source_view(c.CourseDirectory.root)
except Exception as _error:  # noqa: BLE001 (any error in course.toml stops every path)
    # traitlets logs an exception in a config file and goes on with nbgrader's defaults:
    # the hidden tests would then run in the student's kernel, unjudged and unbounded. A
    # SystemExit is not an Exception: it stops `nbgrader autograde`, the formgrader and the
    # hub's server with this message instead.
    raise SystemExit(f"{os.path.join(c.CourseDirectory.root, 'course.toml')}: {_error}\n"
                     "nbgrader stops here: with its defaults it would grade without the "
                     "course's judge and limits. Fix the file and run it again.")
c.CourseDirectory.course_id = _grading.course_id
c.CourseDirectory.db_url = _grading.db_url

c.Execute.interrupt_on_timeout = True
c.Execute.kernel_name = "python3"
c.ExecutePreprocessor.startup_timeout = 120

# A test cell that a student deleted comes back (marked as such) and is run, so the
# submission is graded on every test rather than silently scoring the missing one.
c.OverwriteCells.add_missing_cells = True

# Hand-ins from outside the hub (`python -m grader.handin ASSIGNMENT --student ID` makes a
# zip the student uploads to the platform) are collected with
# `python -m grader.grading.submission.collect ASSIGNMENT`: whose each upload is and when it
# came are the platform's (a folder per student, or a roster), never the names inside the
# zip (grader/grading/submission/collect.py; exercises/GRADING.md, "Hand-ins by zip").
# nbgrader's `zip_collect` can only read them from the student's names, which let a student
# replace another's work: it stops at once, saying what to run instead.
from grader.grading.submission.collect import ZipCollectRefused  # noqa: E402

c.ZipCollectApp.collector_plugin = ZipCollectRefused
# The exchange's collect (the hub's *Collect*, `nbgrader collect`) likewise: a submission
# folder owned by another user than the student it names is refused (nbgrader only warns),
# and the time collected is the folder's, set by the system, not the name's or the
# timestamp.txt the student's side wrote (grader/grading/submission/exchange.py).
from grader.grading.submission.exchange import OwnedCollect  # noqa: E402

c.ExchangeFactory.collect = OwnedCollect

# Hidden tests: students see neither their code nor the cell body when released.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Feedback shows what hidden tests printed (the check messages), never their code:
# ClearHiddenTests must come after GetGrades (which reads the cells' grade ids), and
# StripTestTracebacks removes the code a traceback quotes from a test cell that raised.
from nbgrader.preprocessors import GetGrades  # noqa: E402
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from grader.grading.submission.feedback import ClearHiddenTestsSafely, StripTestTracebacks  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTestsSafely, StripTestTracebacks,
                                    CSSHTMLHeaderPreprocessor]
c.ClearHiddenTests.enforce_metadata = False   # (and ClearHiddenTestsSafely, its subclass)

# A student's HTML never runs script in a reader's browser: feedback pages and the
# formgrader's view of a submission are sanitized (nh3), and feedback pages carry a
# Content-Security-Policy that forbids inline script (grader/grading/submission/sanitize.py;
# exercises/GRADING.md, "Student HTML").
from grader.grading.submission.sanitize import configure as _sanitize  # noqa: E402

_sanitize(c)

# Test cells never run in the student's kernel, also when grading from the formgrader or
# with `nbgrader autograde` by hand: the judge runs them in nbgrader's own process and only
# data comes back from the kernel (grader/grading/judge/executor.py; exercises/GRADING.md, Verdicts).
# The limits of course.toml that nbgrader applies (the time limit of a cell, the output a
# notebook keeps, what a kernel may write in its folder) come with it; `make grade` adds
# the sandbox (memory, CPU time, processes), a wall-clock limit per notebook, parallel
# workers and the ledger on top (grader/grading/run/).
from grader.grading.judge.executor import JudgedExecute  # noqa: E402
from grader.grading.sandbox.crashes import autograde_config as _autograde  # noqa: E402

c.merge(_autograde(_grading.limits, JudgedExecute))
