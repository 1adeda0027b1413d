"""nbgrader on the course hub: one course, one exchange, and who is who.

Every account's server is the same OS user here (hub/jupyterhub_config.py), and nbgrader
would otherwise name every submission after that OS user. So a student's id is their hub
account (``JUPYTERHUB_USER``), and only instructors get a course directory (their home's
``course/``, prepared by hub/run.py). The course's own ``nbgrader_config.py``, in that
directory, is loaded after this file for the instructor.

Whatever the course's own configuration says, the formgrader's view of a submission and
the feedback it generates are sanitized (grader/grading/submission/sanitize.py): a student's HTML
runs no script in the instructor's browser.
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821

c.CourseDirectory.course_id = os.environ["COURSE_HUB_COURSE_ID"]
c.Exchange.root = os.environ["COURSE_HUB_EXCHANGE"]

_user = os.environ.get("JUPYTERHUB_USER", "")
if _user in os.environ.get("COURSE_HUB_INSTRUCTORS", "").split(","):
    c.CourseDirectory.root = str(Path(os.environ["HOME"]) / "course")
    # nbgrader's collect compares a submission's claimed student with the OS user owning
    # its files ("cheating attempt?"). Where every account is one OS user (this demo hub's
    # spawner) that warning fires on every honest submission and means nothing, so it is
    # off; on a hub with one system user per account (PAM, The Littlest JupyterHub,
    # containers with their own uids) it stays on, and then it names a real mismatch.
    if os.environ.get("COURSE_HUB_ONE_OS_USER") == "1":
        c.ExchangeCollect.check_owner = False
else:
    c.CourseDirectory.student_id = _user

from grader.grading.submission.sanitize import configure as _sanitize  # noqa: E402

_sanitize(c)
