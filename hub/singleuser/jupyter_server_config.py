"""Every course user's Jupyter server on the hub (hub/jupyterhub_config.py points here).

Known trap: since JupyterHub 4.1 the single-user server sends
``Content-Security-Policy: frame-ancestors 'none'`` unless a policy is configured, and
nbgrader's formgrader, which JupyterLab shows in an iframe of the same server, stays
blank. Allowing frames from the server's own origin (``'self'``) fixes it and still
refuses every other site. tests/hub/test_e2e_browser.py checks the formgrader renders.
"""
c = get_config()  # noqa: F821

c.ServerApp.tornado_settings = {
    "headers": {"Content-Security-Policy": "frame-ancestors 'self'"},
}
# The localhost demo and CI run as root (one OS user for every account, see
# hub/jupyterhub_config.py); a real deployment runs each user as themselves.
c.ServerApp.allow_root = True
