"""The one thing an unprivileged judge may ask of root: start a student rank in its sandbox.

An a7 check runs the student's rank function on several processes, each alone in a sandbox
(:mod:`grader.grading.sandbox.rank`: bubblewrap, the slot's uid), which only root can start.
The judge gives up root before the first test cell (:mod:`grader.grading.judge.confine`), so
it forks this *gate* first: a root process that listens on a socket in the judge's own
folder (mode 0600, the judge uid's) and does one thing per connection:

- the client (``python -m grader.grading.judge.rankgate SOCKET FOLDER -- COMMAND...``, the
  command :class:`grader.ranks.relay.StudentRanks` puts in front of each student rank) sends
  ``FOLDER``, ``COMMAND`` and its standard streams (as file descriptors);
- the gate opens ``FOLDER`` only as a ``course-rank-*`` folder directly in the judge's
  folder, never following a link (``O_NOFOLLOW`` beside its own fd of the judge's folder),
  gives it to the slot's uid (group: the judge's, mode 0710, so the relay can reach the
  rank's socket and nothing else), and runs ``COMMAND`` in the rank sandbox with that very
  folder bound (by ``/proc/<gate>/fd/N`` of the fd it opened, not by its path);
- it answers with the exit status when the rank ends; when the client goes away first (the
  relay killed it), it kills the rank. Either way it removes the folder.

So the judge can have root start nothing but what the student's own kernel already is: the
student's code, as the slot's uid, in a sandbox. The gate dies with the judge (a pipe's end
of file, not only the parent-death signal, which a judge without root cannot send it).
"""
from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading

from grader import unixsock

__all__ = ["start", "client_command", "main"]

PREFIX = "course-rank-"
_MAX_REQUEST = 1 << 20


def client_command(gate: str) -> list[str]:
    """What ``$COURSE_RANK_ISOLATION`` says in the judge: this module's client."""
    return [sys.executable, "-m", __name__, gate]


def start(settings_file: str, tmp: str, judge_uid: int) -> str:
    """Fork the gate (call as root, before giving root up); the path of its socket."""
    path = os.path.join(tmp, ".rank-gate.sock")
    problem = unixsock.problem(path)
    if problem:
        raise RuntimeError(f"the rank gate cannot start: {problem}")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unixsock.bind(srv, path)        # any length: the judge's folder is below TMPDIR
    os.chown(path, judge_uid, judge_uid)
    os.chmod(path, 0o600)
    srv.listen(16)
    tmp_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    # The gate must die with the judge. PR_SET_PDEATHSIG alone does not do it: the kernel
    # sends that signal with the dying parent's credentials, and a judge that gave root up
    # may not signal a root process (the gates outlived their judges, one per notebook). So
    # the judge also holds the write end of a pipe that nothing ever writes: when the judge
    # is gone, the gate reads its end of file and exits.
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:                            # the gate
        try:
            keep = {srv.fileno(), tmp_fd, alive_r, 0, 1, 2}
            for name in os.listdir("/proc/self/fd"):
                fd = int(name)
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            _die_with_parent()
            threading.Thread(target=_exit_at_eof, args=(alive_r,), daemon=True).start()
            with open(settings_file) as f:
                settings = json.load(f)
            _serve(srv, tmp, tmp_fd, settings, judge_uid, settings_file)
        finally:
            os._exit(0)
    srv.close()
    os.close(tmp_fd)
    os.close(alive_r)
    _HELD.append(alive_w)                   # kept open for the judge's life, never written
    return path


_HELD: list[int] = []


def _exit_at_eof(fd: int) -> None:
    """In the gate: end it (and, through their parent-death signal, the rank launchers it
    started) once every holder of the pipe's write end, the judge, is gone."""
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    for proc in list(_LIVE):                # (a launcher ends its rank and group on it)
        proc.terminate()
    for proc in list(_LIVE):
        try:
            proc.wait(5)
        except Exception:  # noqa: BLE001 - ending anyway
            proc.kill()
    os._exit(0)


_LIVE: set = set()                          # in the gate: the rank launchers running now


def _die_with_parent() -> None:
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(srv: socket.socket, tmp: str, tmp_fd: int, settings: dict, judge_uid: int,
           settings_file: str) -> None:
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_one, args=(conn, tmp, tmp_fd, settings, judge_uid, settings_file),
                         daemon=True).start()


# where the sandbox's rank launcher has a ``run_rank(settings, command)`` of its own (a control
# group per rank, how it ended), the rank goes through it, in a process of its own (it
# handles signals: a main thread's)
_RUN = ("import json, sys; from grader.grading.sandbox import rank; "
        "run = getattr(rank, 'run_rank', None) or rank.run; "
        "sys.exit(run(json.load(open(sys.argv[1])), json.loads(sys.argv[2])))")


def _one(conn: socket.socket, tmp: str, tmp_fd: int, settings: dict, judge_uid: int,
         settings_file: str) -> None:
    import shutil
    import subprocess

    fds: list[int] = []
    folder_fd = None
    name = None
    try:
        data, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
        req = json.loads(data)
        folder, argv = req["folder"], req["argv"]
        if (len(fds) != 3 or not isinstance(folder, str) or not isinstance(argv, list)
                or not argv or not all(isinstance(a, str) for a in argv)):
            raise ValueError("malformed request")
        name = os.path.basename(folder)
        if (os.path.dirname(folder) != tmp or not name.startswith(PREFIX) or "/" in name
                or name in (".", "..")):
            raise ValueError(f"a rank's folder is a fresh {PREFIX}* folder in the judge's folder")
        folder_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=tmp_fd)
        st = os.fstat(folder_fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != judge_uid:
            raise ValueError("the rank's folder is not the judge's own folder")
        os.fchown(folder_fd, settings["uid"], judge_uid)
        os.fchmod(folder_fd, 0o710)
        from ..sandbox import rank

        cmd = rank.command(settings, folder, argv)
        out: list[str] = []
        i, bound = 0, False
        while i < len(cmd):          # the folder opened above, never its path again
            if cmd[i] == "--bind" and cmd[i + 1:i + 3] == [folder, folder]:
                if not bound:             # (bound once) the very folder opened above,
                    # named by this process's fd of it: nothing the judge swaps in later
                    out += ["--bind", f"/proc/{os.getpid()}/fd/{folder_fd}", folder]
                    bound = True
                i += 3
            else:
                out.append(cmd[i])
                i += 1
        if callable(getattr(rank, "run_rank", None) or getattr(rank, "run", None)):
            out = [sys.executable, "-c", _RUN, settings_file, json.dumps(out)]
        proc = subprocess.Popen(out, stdin=fds[0], stdout=fds[1], stderr=fds[2], cwd="/",
                                close_fds=True)
        _LIVE.add(proc)
        for fd in fds:
            os.close(fd)
        fds = []

        def watch() -> None:          # the client went away: so does the rank
            try:
                while conn.recv(1):
                    pass
            except OSError:
                pass
            if proc.poll() is None:
                proc.terminate()          # (a launcher ends the rank and its group on it)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()

        threading.Thread(target=watch, daemon=True).start()
        code = proc.wait()
        _LIVE.discard(proc)
        try:
            conn.sendall(json.dumps({"code": code}).encode())
        except OSError:
            pass
    except Exception as e:  # noqa: BLE001 - the client reports it
        try:
            conn.sendall(json.dumps({"error": f"{type(e).__name__}: {e}"[:2000]}).encode())
        except OSError:
            pass
    finally:
        for fd in fds:
            os.close(fd)
        if folder_fd is not None:
            os.close(folder_fd)
        if name is not None and name.startswith(PREFIX) and "/" not in name:
            shutil.rmtree(name, ignore_errors=True, dir_fd=tmp_fd)
        try:
            conn.shutdown(socket.SHUT_RDWR)   # the client's EOF (and the watcher's)
        except OSError:
            pass
        conn.close()


def main(argv: list[str]) -> int:
    """The client: ``SOCKET FOLDER -- COMMAND...``; exits as the rank did."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m grader.grading.judge.rankgate SOCKET FOLDER -- COMMAND...",
              file=sys.stderr)
        return 2
    gate, folder, cmd = argv[0], os.path.abspath(argv[1]), argv[3:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unixsock.connect(conn, gate)    # any length, never by a link
    socket.send_fds(conn, [json.dumps({"folder": folder, "argv": cmd}).encode()], [0, 1, 2])
    chunks = []
    while True:
        got = conn.recv(65536)
        if not got:
            break
        chunks.append(got)
    try:
        answer = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        answer = {}
    if "code" in answer:
        code = int(answer["code"])
        return 128 - code if code < 0 else code
    print(f"the rank gate refused the rank: {answer.get('error', 'no answer')}", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
