"""The formgrader guard (grader/grading/submission/formgrader_guard.py) on the formgrader's routes,
without a browser (tests/grading/submission/test_formgrader_guard_browser.py opens the page)."""
from __future__ import annotations

import re

from grader.grading.submission.formgrader_guard import FILES_POLICY, transform_for


class _Request:
    def __init__(self, path):
        self.path = path


def _transform(path, body=b"", finishing=True):
    from tornado.httputil import HTTPHeaders

    guard = transform_for("/user/instructor/")(_Request(path))
    headers = HTTPHeaders({"Content-Length": str(len(body)), "Etag": '"x"',
                           "Content-Security-Policy": "frame-ancestors 'self'"})
    return guard.transform_first_chunk(200, headers, body, finishing)


def test_the_guard_sends_the_submission_view_with_a_nonce_policy():
    page = (b'<html><head><script src="/static/jquery.js"></script></head><body>'
            b'<div class="container" id="notebook-container"><script>evil()</script>')
    _, headers, body = _transform("/user/instructor/formgrader/submissions/abc123/", page)
    policy = headers["Content-Security-Policy"]
    nonce = re.search(r"'nonce-([^']+)'", policy).group(1)
    assert f'<script nonce="{nonce}" src="/static/jquery.js">'.encode() in body
    assert b"<script>evil()</script>" in body
    assert "frame-ancestors 'self'" in policy
    assert headers["Content-Length"] == str(len(body)) and "Etag" not in headers
    assert headers["Cache-Control"] == "no-store"


def test_the_guard_sandboxes_a_submissions_other_files_and_leaves_other_routes():
    _, headers, _ = _transform("/user/instructor/formgrader/submissions/abc123/evil.html")
    assert headers["Content-Security-Policy"] == FILES_POLICY
    assert FILES_POLICY.startswith("sandbox;")
    _, headers, body = _transform("/user/instructor/formgrader/manage_assignments", b"<p>")
    assert headers["Content-Security-Policy"] == "frame-ancestors 'self'" and body == b"<p>"
    _, headers, _ = _transform("/user/instructor/formgrader/submissions/abc123/", b"<p>",
                               finishing=False)
    assert "script-src 'nonce-" in headers["Content-Security-Policy"]
