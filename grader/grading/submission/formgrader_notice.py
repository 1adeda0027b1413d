"""A Jupyter server extension: every page of nbgrader's formgrader says what its grading
does not protect against, and which path does.

The formgrader's *Autograde* buttons (and the ``nbgrader autograde`` command its
instructions show) run each student's notebook in a kernel of the instructor's own Jupyter
server: the test cells are judged and ``course.toml``'s cell time and output limits apply
(``exercises/nbgrader_config.py``), but there is no sandbox: the student's code runs as the
instructor's user, with the network, and with no memory, CPU-time or process limit. ``make
grade`` (``python -m grader.grading``) is the path that adds them
(``exercises/GRADING.md``, "Three ways to grade").

nbgrader renders its pages with a Jinja environment it builds itself (no template path to
configure), so this extension wraps that environment's loader: ``base.tpl``, which the
formgrader's pages extend, gets :data:`NOTICE` inserted before its ``body`` block; nbgrader's
own file is read and left as it is. nbgrader's formgrader extension loads after this one
(extensions load in name order), so the wrapping is done by a tornado output transform when
the first request arrives, before its handler renders (:func:`transform_for`).

Enabled on the hub in ``hub/singleuser/jupyter_server_config.py``; elsewhere with
``--ServerApp.jpserver_extensions='{"grader.grading.submission.formgrader_notice": True}'``.
"""
from __future__ import annotations

from jinja2 import BaseLoader
from tornado.web import OutputTransform

__all__ = ["NOTICE", "LAYOUT", "NoticeLoader", "install", "transform_for", "MARKER"]

MARKER = "{%- block body -%}"     # in nbgrader's base.tpl: where every page's content starts
TEMPLATE = "base.tpl"
SETTING = "nbgrader_jinja2_env"   # where nbgrader's formgrader keeps its Jinja environment

# nbgrader lays its pages out for a whole window (a 2/12 sidebar beside the content); in a
# JupyterLab tab, 1055 px wide in a 1400 px window, the assignments table (12 columns) ran
# 190 px past the frame and its last columns were cut. Below 1400 px the sidebar goes above
# the content, and the tables' cells keep less padding.
LAYOUT = """\
<style class="course-formgrader-layout">
@media (max-width: 1399px) {
  body > .container-fluid > .row > [class*="col-md-"] { width: 100%; float: none; }
  .jupyter-logo { display: none; }
  .nav-stacked > li { display: inline-block; margin-top: 0; }
}
table.table > thead > tr > th, table.table > tbody > tr > td { padding-left: 5px; padding-right: 5px; }
table.dataTable thead .sorting, table.dataTable thead .sorting_asc,
table.dataTable thead .sorting_desc { padding-right: 22px; }
</style>
"""

NOTICE = LAYOUT + """\
<div class="alert alert-warning course-grading-notice" role="note">
  <b>Not sandboxed.</b> The <i>Autograde</i> buttons here, like <code>nbgrader autograde</code>,
  run each student's notebook in a kernel of this Jupyter server, as your user: the test cells
  are judged (a notebook cannot forge its score) and the course's cell time limit and output
  limits apply, but the student's code can read and change what your account can, reach the
  network, and use memory, CPU time and processes without limit. Use them for notebooks you
  trust. For students' submissions, grade with <code>make grade</code> (<code>python -m
  grader.grading</code>) in the course's repository: each kernel runs as an unprivileged user in
  a sandbox with no network and limited memory, CPU time and processes (the course's
  <code>exercises/GRADING.md</code>, "Three ways to grade").
</div>
"""


class NoticeLoader(BaseLoader):
    """``base`` with :data:`NOTICE` inserted into ``base.tpl`` before its body block."""

    def __init__(self, base: BaseLoader) -> None:
        self.base = base

    def get_source(self, environment, template):
        source, filename, uptodate = self.base.get_source(environment, template)
        if template == TEMPLATE:
            if MARKER not in source:
                raise RuntimeError(f"formgrader notice: {filename} has no {MARKER!r} (nbgrader "
                                   "changed its template); grader/grading/submission/"
                                   "formgrader_notice.py must follow it")
            source = source.replace(MARKER, NOTICE + MARKER, 1)
        return source, filename, uptodate

    def list_templates(self):
        return self.base.list_templates()


def install(settings: dict) -> bool:
    """Wrap the formgrader's Jinja environment in ``settings`` (a tornado application's);
    False when it is not there (yet). Wrapping twice changes nothing."""
    env = settings.get(SETTING)
    if env is None:
        return False
    if not isinstance(env.loader, NoticeLoader):
        env.loader = NoticeLoader(env.loader)
        if env.cache is not None:
            env.cache.clear()      # a page rendered before was cached without it
    return True


def transform_for(settings: dict, log=None) -> type[OutputTransform]:
    """A tornado output transform that installs the notice (:func:`install`) when a request
    arrives, before its handler renders: by then every extension has loaded. (A callback on
    the server's event loop is not enough: under ``jupyterhub-singleuser`` the loop runs
    while extensions load, and it ran before nbgrader's formgrader had loaded.)"""

    class FormgraderNotice(OutputTransform):
        def __init__(self, request) -> None:
            env = settings.get(SETTING)
            if env is not None and not isinstance(env.loader, NoticeLoader):
                install(settings)
                if log is not None:
                    log.info("formgrader notice: its pages say Autograde is not sandboxed "
                             "(grader.grading.submission.formgrader_notice)")

    return FormgraderNotice


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    # nbgrader's formgrader extension loads after this one (extensions load in name order):
    # its Jinja environment is wrapped when the first request comes
    serverapp.web_app.transforms.append(transform_for(serverapp.web_app.settings, serverapp.log))


load_jupyter_server_extension = _load_jupyter_server_extension
