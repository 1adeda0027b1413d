"""Every course user's Jupyter server on the hub (hub/jupyterhub_config.py points here).

Known trap: since JupyterHub 4.1 the single-user server sends
``Content-Security-Policy: frame-ancestors 'none'`` unless a policy is configured, and
nbgrader's formgrader, which JupyterLab shows in an iframe of the same server, stays
blank. Allowing frames from the server's own origin (``'self'``) fixes it and still
refuses every other site. tests/hub/test_e2e_browser.py checks the formgrader renders.

The formgrader's view of a submission shows a student's notebook to a logged-in
instructor on this origin: ``grader.grading.submission.formgrader_guard`` sends it with a
Content-Security-Policy that only the page's own scripts pass (and a sandbox for the
other files of a submission). tests/hub/test_formgrader_payloads.py checks no student
script runs there and the grading form still works.

``grader.grading.submission.formgrader_notice`` puts a notice on every formgrader page: its
Autograde button grades without the sandbox (as this server's user), and ``make grade`` is
the protected path (exercises/GRADING.md, "Three ways to grade").
"""
c = get_config()  # noqa: F821

c.ServerApp.tornado_settings = {
    "headers": {"Content-Security-Policy": "frame-ancestors 'self'"},
}
# The localhost demo and CI run as root (one OS user for every account, see
# hub/jupyterhub_config.py); a real deployment runs each user as themselves.
c.ServerApp.allow_root = True
c.ServerApp.jpserver_extensions = {"grader.grading.submission.formgrader_guard": True,
                                  "grader.grading.submission.formgrader_notice": True}
