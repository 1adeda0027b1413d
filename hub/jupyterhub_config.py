"""JupyterHub configuration for the course hub (``make hub``, ``hub/run.py``, tests/hub).

Every setting that depends on where the hub runs comes from an environment variable that
``hub/run.py`` sets (``COURSE_HUB_*``), so one file serves the localhost demo, the browser
test (random loopback ports, a temporary state directory) and a starting point for a real
deployment (see the README, "JupyterHub").

What this file chooses, and what a real deployment changes:
- Authentication: ``DummyAuthenticator`` with one shared demo password and a fixed list of
  accounts. A real hub uses PAM (system users) or OAuth (GitHub, your university's SSO).
- Spawner: ``SimpleLocalProcessSpawner``: every user's Jupyter server is a local process of
  the hub's own OS user, with its own home directory under the state directory. It keeps
  the users' files and nbgrader identities apart, not the users themselves (same OS user).
  A real hub runs each user as a system user (The Littlest JupyterHub) or in a container
  (Zero to JupyterHub on Kubernetes).
- nbgrader's exchange: a directory under the state directory that every server sees. On a
  real hub it is shared storage mounted into every user's server (see the README).
"""
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (injected by JupyterHub)

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ["COURSE_HUB_ROOT"]).resolve()       # all hub state lives here
IP = os.environ.get("COURSE_HUB_IP", "127.0.0.1")
PORT = int(os.environ.get("COURSE_HUB_PORT", "8000"))
INSTRUCTORS = os.environ.get("COURSE_HUB_INSTRUCTORS", "instructor").split(",")
STUDENTS = os.environ.get("COURSE_HUB_STUDENTS", "student1,student2").split(",")
PASSWORD = os.environ.get("COURSE_HUB_PASSWORD", "course-demo")

# --- where it listens: loopback only; the hub's and the proxy's API ports are set by run.py
c.JupyterHub.bind_url = f"http://{IP}:{PORT}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("COURSE_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('COURSE_HUB_PROXY_API_PORT', '8001')}"
# configurable-http-proxy from the npm registry, installed into node_modules/ by `make hub`
c.ConfigurableHTTPProxy.command = [os.environ.get(
    "COURSE_HUB_PROXY", str(HERE.parent / "node_modules" / ".bin" / "configurable-http-proxy"))]
c.ConfigurableHTTPProxy.pid_file = str(ROOT / "proxy.pid")

# --- state: nothing outside ROOT
c.JupyterHub.db_url = f"sqlite:///{ROOT / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(ROOT / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(ROOT / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True   # stopping the hub stops every user's server
c.JupyterHub.cleanup_proxy = True

# --- accounts: demo only (see the module docstring)
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = PASSWORD
c.Authenticator.allowed_users = set(INSTRUCTORS) | set(STUDENTS)
c.Authenticator.admin_users = set(INSTRUCTORS)

# --- one local Jupyter server per user, each in its own home directory
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = str(ROOT / "home" / "{username}")
# the course's environment: this interpreter's jupyterhub-singleuser, whose kernel is the
# course's (torch, paddle, grader), installed by `make install` into the same prefix
c.Spawner.cmd = [str(Path(sys.prefix) / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120     # 2 cores, possibly busy: a server can take a while
c.Spawner.http_timeout = 120
c.Spawner.environment = {
    # read by hub/singleuser/nbgrader_config.py
    "COURSE_HUB_COURSE_ID": os.environ.get("COURSE_HUB_COURSE_ID", "pdl"),
    "COURSE_HUB_EXCHANGE": str(ROOT / "exchange"),
    "COURSE_HUB_INSTRUCTORS": ",".join(INSTRUCTORS),
    # the course's kernels and nbgrader must not try to use a display
    "MPLBACKEND": "Agg",
    # every account's server runs as this one OS user (the spawner above): nbgrader's
    # owner check on collect cannot tell accounts apart here (hub/singleuser/nbgrader_config.py)
    "COURSE_HUB_ONE_OS_USER": "1",
}


def _per_role_config(spawner):
    """Instructors get the formgrader; students get only the assignment list.

    The role's Jupyter config directories come before the venv's own (where nbgrader's
    extensions are enabled), and after the user's ~/.jupyter.
    """
    dirs = [HERE / "singleuser"]
    if spawner.user.name not in INSTRUCTORS:
        dirs.insert(0, HERE / "singleuser" / "student")
    spawner.environment = dict(spawner.environment,
                               JUPYTER_CONFIG_PATH=os.pathsep.join(map(str, dirs)))


c.Spawner.pre_spawn_hook = _per_role_config
