"""The course as a multi-user JupyterHub: configuration (jupyterhub_config.py, singleuser/)
and the launcher (run.py) that ``make hub`` and tests/hub use."""
