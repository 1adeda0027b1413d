"""A Jupyter server extension: the formgrader's views of a submission run no student script.

nbgrader's formgrader is served by the instructor's Jupyter server, on the hub's origin,
to a logged-in instructor. Two of its routes show what a student wrote:

- ``formgrader/submissions/<id>/``: the autograded notebook rendered to HTML. The exporter
  sanitizes it (:func:`grader.grading.submission.sanitize.configure`, in the nbgrader config); this
  extension also sends a Content-Security-Policy (:func:`grader.grading.submission.sanitize.protect`)
  whose nonce only the page's own scripts carry: those before the notebook, where the
  template (jQuery, Backbone, the grading form) writes them. The grading form works as
  before; a student's ``<script>``, ``onerror=`` or ``javascript:`` link does not run, even
  if it got past the sanitizer.
- ``formgrader/submissions/<id>/<file>``: any other file of the submission (an ``.html`` or
  ``.svg`` a student added), served from the course's folder: sent with
  ``sandbox`` (a unique origin, no script) and ``default-src 'none'``.

Enabled on the hub in ``hub/singleuser/jupyter_server_config.py``; elsewhere with
``--ServerApp.jpserver_extensions='{"grader.grading.submission.formgrader_guard": True}'``.
"""
from __future__ import annotations

import re

from tornado.web import OutputTransform

from .sanitize import protect

# where the template's part of the formgrader's page ends and the notebook begins
NOTEBOOK_START = 'id="notebook-container"'
FRAMES = "frame-ancestors 'self'"       # JupyterLab shows the formgrader in an iframe
FILES_POLICY = ("sandbox; default-src 'none'; img-src 'self' data:; "
                f"style-src 'self' 'unsafe-inline'; {FRAMES}")


def transform_for(base_url: str) -> type[OutputTransform]:
    """The output transform for a server whose base URL is ``base_url``."""
    base = "/" + base_url.strip("/") + "/" if base_url.strip("/") else "/"
    route = re.compile(re.escape(base) + r"formgrader/submissions/(?P<rest>.+)\Z")
    view = re.compile(r"[^/]+/?\Z")

    class FormgraderGuard(OutputTransform):
        def __init__(self, request) -> None:
            m = route.match(request.path)
            self.kind = None if m is None else ("view" if view.match(m["rest"]) else "file")

        def transform_first_chunk(self, status_code, headers, chunk, finishing):
            if self.kind == "file":
                headers["Content-Security-Policy"] = FILES_POLICY
            elif self.kind == "view":
                if finishing:      # the whole page is here: nonce the template's scripts
                    page, policy = protect(chunk.decode("utf-8", "replace"), NOTEBOOK_START,
                                           connect=True)
                    chunk = page.encode("utf-8")
                    if "Content-Length" in headers:
                        headers["Content-Length"] = str(len(chunk))
                else:              # streamed: cannot tell the template's scripts, allow none
                    _, policy = protect("", NOTEBOOK_START, connect=True)
                headers["Content-Security-Policy"] = f"{policy}; {FRAMES}"
                # a nonce is for one response: never cached, never revalidated
                headers["Cache-Control"] = "no-store"
                headers.pop("Etag", None)
            return status_code, headers, chunk

    return FormgraderGuard


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    transforms = serverapp.web_app.transforms
    # first: it must see the page before a compressing transform does
    transforms.insert(0, transform_for(serverapp.base_url))
    serverapp.log.info("formgrader guard: submission views get a strict "
                       "Content-Security-Policy (grader.grading.submission.formgrader_guard)")


load_jupyter_server_extension = _load_jupyter_server_extension
