"""A real PostgreSQL server for the tests, started from Debian's binaries.

``postgres_server`` (a session fixture: import it into a test module) runs ``initdb`` and
``pg_ctl`` from ``/usr/lib/postgresql/<version>/bin`` on a data directory in a temporary
folder, listening on a free TCP port of 127.0.0.1 and on a unix socket in that folder, with
trust authentication and no fsync (tests only). PostgreSQL refuses to run as root, so as
root the server runs as the ``postgres`` system user (or ``nobody``) via ``setpriv``.
Test modules that import the fixture share one server; it is stopped and its folder
removed at the end of the session.

Without the binaries the tests are skipped, and fail under CI (env ``CI`` set), with a
message naming ``make grade-deps`` (Debian's ``postgresql`` package).
"""
from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

import pytest

from grader.lab.core.ports import free_port

__all__ = ["PostgresServer", "postgres_server", "find_binaries", "start", "MISSING"]

MISSING = ("PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb, pg_ctl) are "
           "missing: run `make grade-deps` (as root it installs Debian's postgresql), "
           "then run the tests again")


@dataclass
class PostgresServer:
    url: str                  # postgresql+psycopg2://postgres@127.0.0.1:<port>/postgres
    port: int
    root: str                 # temporary folder: data/, the socket, server.log
    bindir: str
    run_as: list[str] = field(default_factory=list)
    _databases: int = 0

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database on this server; returns its URL."""
        from sqlalchemy import create_engine, text
        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        engine = create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        if os.path.isdir(os.path.join(self.root, "data")):
            subprocess.run(self.run_as + [os.path.join(self.bindir, "pg_ctl"), "-D",
                                          os.path.join(self.root, "data"), "-m", "immediate",
                                          "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def find_binaries() -> str | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding initdb and pg_ctl."""
    found = [os.path.dirname(p) for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")
             if os.access(os.path.join(os.path.dirname(p), "pg_ctl"), os.X_OK)]
    return max(found, key=lambda d: float(d.split("/")[-2]), default=None)


def _unprivileged() -> tuple[list[str], int, int]:
    """How to run a command as a user PostgreSQL accepts: [] when we are not root."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    try:
        pw = pwd.getpwnam("postgres")
        uid, gid = pw.pw_uid, pw.pw_gid
    except KeyError:
        uid = gid = 65534  # nobody / nogroup
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"], uid, gid


def start(bindir: str) -> PostgresServer:
    """initdb + start a server; raises RuntimeError with the server's log on failure."""
    run_as, uid, gid = _unprivileged()
    root = tempfile.mkdtemp(prefix="pgtest-")
    os.chmod(root, 0o755)
    os.chown(root, uid, gid)
    data = os.path.join(root, "data")
    env = dict(os.environ, LC_ALL="C", LANG="C", TZ="UTC")
    r = subprocess.run(run_as + [os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres",
                                 "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    log = os.path.join(root, "server.log")
    for _ in range(5):  # the port may be taken between choosing and binding it
        port = free_port()
        opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
        r = subprocess.run(run_as + [os.path.join(bindir, "pg_ctl"), "-D", data, "-l", log,
                                     "-o", opts, "-w", "-t", "60", "start"],
                           capture_output=True, text=True, env=env, timeout=120)
        if r.returncode == 0:
            return PostgresServer(f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres",
                                  port, root, bindir, run_as)
    logtext = open(log).read() if os.path.exists(log) else ""
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"PostgreSQL did not start:\n{r.stdout}\n{r.stderr}\n{logtext[-3000:]}")


_shared: dict[str, object] = {"server": None, "users": 0}


@pytest.fixture(scope="session")
def postgres_server():
    """One running server for the session (shared by every module importing this)."""
    bindir = find_binaries()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.fail("psycopg2 is missing: run `make install` (the `grading` extra has "
                    "psycopg2-binary, pinned in constraints.txt)")
    if _shared["server"] is None:
        server = start(bindir)
        atexit.register(server.stop)  # also when the session ends abnormally
        _shared["server"] = server
    _shared["users"] += 1
    try:
        yield _shared["server"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            _shared["server"].stop()
            _shared["server"] = None
