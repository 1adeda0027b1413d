"""Start the course hub: ``make hub`` (or ``python -m hub.run``), and the browser test.

It prepares a state directory (hub database, cookie secret, every user's home, nbgrader's
exchange), copies the course into the instructor's home so its assignments are ready to
release, starts JupyterHub with ``hub/jupyterhub_config.py`` and prints where to log in.
Stopping it (Ctrl-C) stops the proxy and every user's server too.

    python -m hub.run [--root .hub] [--port 8000] [--students student1,student2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COURSE = REPO / "exercises"
PROXY = REPO / "node_modules" / ".bin" / "configurable-http-proxy"
# nbgrader's generated folders and state: never copied into a fresh hub
_NOT_COURSE = ("release", "submitted", "autograded", "feedback", "gradebook.db", "reports",
               ".grading.lock", ".nbgrader.log", ".ipynb_checkpoints", "__pycache__",
               ".source_view")      # links into a private overlay: never copied


def free_port() -> int:
    """A free port outside the kernel's ephemeral range (see grader.lab.core.ports)."""
    from grader.lab.core import ports

    return ports.free_port()


def course_id_of(course: Path, default: str = "pdl") -> str:
    """The course id the course's own ``nbgrader_config.py`` sets, else ``default``."""
    cfg = course / "nbgrader_config.py"
    if cfg.exists():
        from traitlets.config.loader import PyFileConfigLoader

        loaded = PyFileConfigLoader(cfg.name, str(course)).load_config()
        cid = loaded.get("CourseDirectory", {}).get("course_id")
        if cid:
            return str(cid)
    return default


def enrol(course: Path, students: list[str]) -> None:
    """Put the demo students into the course's gradebook, so the formgrader lists them
    (by account name) before anyone submits. nbgrader runs from the course directory and
    reads its ``nbgrader_config.py`` (root, gradebook); it calls ``alembic`` by name."""
    roster = course / ".demo_students.csv"
    roster.write_text("id,first_name,last_name\n"
                      + "".join(f"{s},{s},(demo)\n" for s in students))
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.prefix) / "bin"),
                                                 os.environ.get("PATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "db", "student", "import", roster.name],
        cwd=course, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    roster.unlink()
    if done.returncode:
        raise RuntimeError(f"enrolling the demo students in {course} failed:\n"
                           + done.stderr[-3000:])


def prepare(root: Path, course: Path, instructors: list[str],
            students: list[str] = ()) -> list[Path]:
    """Create the state directory and give each instructor a copy of the course.

    The copy is made once: an instructor's course directory (gradebook, releases, edits)
    survives restarts. Without assignments in ``course/source``, the demo assignment of
    :mod:`hub.demo_course` is offered instead. ``students`` are enrolled in each new copy's
    gradebook. Returns the instructors' course directories.

    A course that names a private overlay (``[overlay]`` in ``course.toml``, hidden checks
    and variants for credit) is refused: this hub runs every account as one OS user, so a
    student's kernel could read the overlay.
    """
    from grader.grading.overlay import folder

    private = folder(course) if course.is_dir() else None
    if private is not None:
        raise RuntimeError(
            f"{course / 'course.toml'} names a private overlay ({private}), and this hub runs "
            "every account's server as one OS user, so a student's kernel could read it. "
            "Serve a course graded for credit from a hub whose students are system users of "
            "their own (exercises/GRADING.md, \"Grading for credit: a private overlay\"), or "
            "demo the public course without the [overlay] section.")
    root.mkdir(parents=True, exist_ok=True)
    exchange = root / "exchange"
    exchange.mkdir(exist_ok=True)
    exchange.chmod(0o777)  # what nbgrader expects of a shared exchange
    made = []
    for name in instructors:
        dest = root / "home" / name / "course"
        if not dest.exists():
            if course.is_dir() and any((course / "source").glob("*/*.ipynb")):
                shutil.copytree(course, dest, ignore=shutil.ignore_patterns(*_NOT_COURSE))
            else:
                from hub.demo_course import write_course

                write_course(dest)
            if students:
                enrol(dest, list(students))
        made.append(dest)
    return made


@dataclass
class Hub:
    """A running hub: its address, accounts and process."""
    url: str
    root: Path
    password: str
    instructors: list[str]
    students: list[str]
    course_id: str
    process: subprocess.Popen
    log: Path
    _seen: set = field(default_factory=set)

    def course_dir(self, instructor: str | None = None) -> Path:
        return self.root / "home" / (instructor or self.instructors[0]) / "course"

    def home(self, user: str) -> Path:
        return self.root / "home" / user

    def processes(self) -> list:
        """The hub and everything it started (proxy, users' servers, their kernels)."""
        import psutil

        try:
            hub = psutil.Process(self.process.pid)
            procs = [hub, *hub.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        self._seen.update(procs)  # remember them: a user's server outlives a killed hub
        return [p for p in self._seen if p.is_running()]

    def stop(self, timeout: float = 30, grace: float = 10) -> list[str]:
        """Stop the hub (which stops the proxy and the servers), then kill anything left.

        Returns what had to be killed: processes the hub's own shutdown left running
        ``grace`` seconds after the hub ended (a user's kernels end shortly after its
        server, on their own: a CI run once found two still ending right after the hub).
        """
        import psutil

        def alive(p) -> bool:
            try:
                return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False

        self.processes()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        left = [p for p in self._seen if alive(p)]
        end = time.monotonic() + grace
        while left and time.monotonic() < end:
            time.sleep(0.2)
            left = [p for p in left if alive(p)]
        killed = []
        for p in left:
            try:
                killed.append(" ".join(p.cmdline()[:4]))
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=10)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        return killed


def start(root: Path, *, port: int | None = None, ip: str = "127.0.0.1",
          course: Path = COURSE, instructors=("instructor",),
          students=("student1", "student2"), password: str = "course-demo",
          timeout: float = 120) -> Hub:
    """Start the hub on ``ip:port`` (a free port if None) and wait until it answers."""
    root = Path(root).resolve()
    instructors, students = list(instructors), list(students)
    if not PROXY.exists() and not shutil.which("configurable-http-proxy"):
        raise RuntimeError(f"configurable-http-proxy not found at {PROXY}: run `npm ci` "
                           "in the repository (make hub does)")
    courses = prepare(root, Path(course), instructors, students)
    port = port or free_port()
    env = dict(os.environ,
               COURSE_HUB_ROOT=str(root), COURSE_HUB_IP=ip, COURSE_HUB_PORT=str(port),
               COURSE_HUB_API_PORT=str(free_port()), COURSE_HUB_PROXY_API_PORT=str(free_port()),
               COURSE_HUB_INSTRUCTORS=",".join(instructors),
               COURSE_HUB_STUDENTS=",".join(students), COURSE_HUB_PASSWORD=password,
               COURSE_HUB_COURSE_ID=course_id_of(courses[0]),
               COURSE_HUB_PROXY=str(PROXY) if PROXY.exists() else shutil.which("configurable-http-proxy"),
               # users' servers find this venv's jupyter, nbgrader and kernel first
               PATH=os.pathsep.join([str(Path(sys.prefix) / "bin"), os.environ.get("PATH", "")]))
    log = root / "jupyterhub.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(HERE / "jupyterhub_config.py")],
            cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    hub = Hub(url=f"http://{ip}:{port}", root=root, password=password,
              instructors=instructors, students=students,
              course_id=env["COURSE_HUB_COURSE_ID"], process=proc, log=log)
    try:
        _wait_ready(hub, timeout)
    except BaseException:
        hub.stop()
        raise
    return hub


def _wait_ready(hub: Hub, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hub.process.poll() is not None:
            raise RuntimeError(f"JupyterHub exited with {hub.process.returncode}:\n"
                               + hub.log.read_text()[-3000:])
        try:
            # through the proxy, so both the proxy and the hub are up
            with urllib.request.urlopen(f"{hub.url}/hub/health", timeout=5) as r:
                if r.status == 200:
                    hub.processes()
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"JupyterHub not ready after {timeout:.0f} s:\n"
                       + hub.log.read_text()[-3000:])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(REPO / ".hub"),
                    help="state directory (database, homes, exchange); default .hub/")
    ap.add_argument("--ip", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--course", default=str(COURSE), help="nbgrader course directory to serve")
    ap.add_argument("--instructors", default="instructor")
    ap.add_argument("--students", default="student1,student2,student3")
    ap.add_argument("--password", default=os.environ.get("COURSE_HUB_PASSWORD", "course-demo"))
    a = ap.parse_args(argv)
    hub = start(Path(a.root), port=a.port, ip=a.ip, course=Path(a.course),
                instructors=a.instructors.split(","), students=a.students.split(","),
                password=a.password)
    from grader.grading.overlay import assignments as _assignments

    assignments = _assignments(hub.course_dir())
    print(f"""
Course hub running: {hub.url}/hub/login   (Ctrl-C stops it and every user's server)
  instructors: {', '.join(hub.instructors)}   students: {', '.join(hub.students)}
  password (every demo account): {hub.password}
  course '{hub.course_id}', ready to generate and release: {', '.join(assignments)}
    (instructor: Nbgrader menu > Formgrader; students: Nbgrader menu > Assignment List)
  state: {hub.root}   log: {hub.log}
""", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop and hub.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
    if hub.process.returncode not in (0, -signal.SIGTERM, None):
        sys.exit(f"JupyterHub exited with {hub.process.returncode}; see {hub.log}")


if __name__ == "__main__":
    main()
