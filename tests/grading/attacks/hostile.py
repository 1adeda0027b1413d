"""Hostile submissions: what a student can put in ``submitted/`` and run in the kernel to read
what is not theirs, hurt another student's grade or stop the class run (issue 15).

:func:`build` writes every attack of :data:`ATTACKS` into a course beside nothing else; each
attack is a small function that makes one student's folder. Most start from alice's correct
assignment 1 (8 of 8) so that "the rest of the work is graded" shows as her score. The
limits they are run under (:data:`COURSE_TOML`) are small, so that no attack needs
gigabytes: the same code paths refuse a 28 MB notebook as a 3 MB one.
"""
from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Callable

import nbformat

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"
NB = f"{A1}.ipynb"

COURSE_TOML = """
[limits]
cell_timeout_s = 30
notebook_timeout_s = 300
memory_gb = 2.5
output_mb = 1.0
kernel_files = 300
kernel_disk_mb = 20
feedback_timeout_s = 120

[submission]
max_files = 20
max_file_mb = 1.0
max_total_mb = 4.0
max_notebook_mb = 2.0
max_json_depth = 48
max_json_items = 200000
"""


def alice() -> nbformat.NotebookNode:
    return nbformat.read(EXERCISES / "submitted" / "alice" / A1 / NB, as_version=4)


def _cell(nb, gid: str):
    return next(c for c in nb.cells if isinstance(c.metadata.get("nbgrader"), dict)
                and c.metadata["nbgrader"].get("grade_id") == gid)


def _folder(course: Path, student: str) -> Path:
    out = course / "submitted" / student / A1
    out.mkdir(parents=True)
    return out


def _write(course: Path, student: str, nb) -> Path:
    out = _folder(course, student)
    nbformat.write(nb, out / NB)
    return out


def _with_cell(course: Path, student: str, code: str) -> Path:
    """alice's notebook with an ordinary code cell (no nbgrader metadata) after the imports."""
    nb = alice()
    nb.cells.insert(2, nbformat.v4.new_code_cell(code))
    return _write(course, student, nb)


# -- the submission is data ------------------------------------------------------------------

def links_to_everything(course: Path, student: str) -> None:
    """alice's notebook plus links to what the grader (root) can read: hidden tests and
    solutions, another student's notebook, the gradebook, the course settings, /etc/shadow,
    the grading process's environment, endless and blocking files; a named pipe, a socket,
    a device, a linked folder. Before: all copied into autograded/ and the released feedback;
    /dev/zero filled the disk, /proc/kmsg blocked the digest (and the course lock) forever."""
    out = _write(course, student, alice())
    targets = {"solution.ipynb": course / "source" / A1 / NB,
               "other.ipynb": course / "submitted" / "alice" / A1 / NB,
               "gradebook.db": course / "gradebook.db", "course.toml": course / "course.toml",
               "shadow": "/etc/shadow", "environ": "/proc/self/environ", "zero": "/dev/zero",
               "kmsg": "/proc/kmsg", "etc": "/etc"}
    for name, target in targets.items():
        os.symlink(target, out / name)
    os.mkfifo(out / "pipe")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(out / "sock"))
    if os.geteuid() == 0:
        os.mknod(out / "device", stat.S_IFCHR | 0o600, os.makedev(1, 5))   # /dev/zero's


def notebook_links_to_the_solution(course: Path, student: str) -> None:
    os.symlink(course / "source" / A1 / NB, _folder(course, student) / NB)


def notebook_links_to_another_student(course: Path, student: str) -> None:
    os.symlink(course / "submitted" / "alice" / A1 / NB, _folder(course, student) / NB)


def notebook_is_a_hard_link_to_the_solution(course: Path, student: str) -> None:
    os.link(course / "source" / A1 / NB, _folder(course, student) / NB)


def notebook_is_a_fifo(course: Path, student: str) -> None:
    os.mkfifo(_folder(course, student) / NB)   # blocked a worker until the notebook deadline


def student_folder_links_to_another(course: Path, student: str) -> None:
    (course / "submitted").mkdir(exist_ok=True)
    os.symlink(course / "submitted" / "alice", course / "submitted" / student)


def notebook_over_the_size_limit(course: Path, student: str) -> None:
    nb = alice()
    nb.metadata["padding"] = "x" * (3 * 2**20)    # 3 MB; the limit is 2 MB
    _write(course, student, nb)


def ten_million_braces(course: Path, student: str) -> None:
    """The 28.6 MB notebook with 10 million ``{}`` in cell metadata, scaled to the test's
    limits: 300,000 ``{}`` (0.9 MB) against 200,000 values."""
    out = _write(course, student, alice())
    text = (out / NB).read_text()
    (out / NB).write_text(text.replace('"metadata": {', '"metadata": {"x": ['
                                       + "{}," * 299_999 + '{}], ', 1))


def deep_json(course: Path, student: str) -> None:
    out = _write(course, student, alice())
    text = (out / NB).read_text()
    (out / NB).write_text(text.replace('"metadata": {', '"metadata": {"x": '
                                       + "[" * 5000 + "]" * 5000 + ", ", 1))


def too_many_and_too_large_files(course: Path, student: str) -> None:
    out = _write(course, student, alice())
    for i in range(30):                         # the limit is 20 files
        (out / f"f{i:02d}.txt").write_text(str(i))
    (out / "big.bin").write_bytes(b"0" * (2 * 2**20))   # the limit is 1 MB a file


# -- names and reports -----------------------------------------------------------------------

LONG_ID = "x" * 250
FORMULA_ID = '=HYPERLINK("evil.example","open me")'


def long_id(course: Path, student: str) -> None:
    _write(course, LONG_ID, alice())      # crashed the worker on its log file's name


def formula_id(course: Path, student: str) -> None:
    _write(course, FORMULA_ID, alice())   # a formula in grades.csv when opened


# -- tampered metadata -----------------------------------------------------------------------

def tampered_ids(course: Path, student: str) -> None:
    nb = alice()
    _cell(nb, "test_time_work").metadata.nbgrader["grade_id"] = "zzz"   # KeyError
    _cell(nb, "experiment").metadata.nbgrader["grade_id"] = "time_work"  # twice
    _write(course, student, nb)


def tampered_types(course: Path, student: str) -> None:
    nb = alice()
    _cell(nb, "test_experiment").metadata.nbgrader["points"] = "lots"
    _cell(nb, "test_time_work").metadata["nbgrader"] = "garbage"
    intro = _cell(nb, "intro").metadata.nbgrader
    intro.update(grade=True, points=100)
    _write(course, student, nb)


def tampered_schema_and_points(course: Path, student: str) -> None:
    nb = alice()
    _cell(nb, "test_time_work").metadata.nbgrader["schema_version"] = 99
    _cell(nb, "test_experiment").metadata.nbgrader.update(points=100, solution=True)
    _write(course, student, nb)


def hidden_tests_marker_without_end(course: Path, student: str) -> None:
    nb = alice()
    _cell(nb, "time_work").source += "\n# ### BEGIN HIDDEN TESTS\n"   # stopped the feedback
    _write(course, student, nb)


# -- what the kernel does --------------------------------------------------------------------

def prints_3_mb(course: Path, student: str) -> None:
    """3 MB printed (300 MB made a 524 MB notebook and feedback page); the limit is 1 MB."""
    _with_cell(course, student, "for _ in range(30):\n    print('y' * 100_000)")


def prints_10_mb_at_once(course: Path, student: str) -> None:
    """More than the largest message read (4 x output_mb + 1 MB): refused whole."""
    _with_cell(course, student, "print('z' * (10 * 2**20))")


def sends_a_huge_message_header(course: Path, student: str) -> None:
    """A message whose JSON header is 8 MB of nested lists (240 MB grew the worker to 5 GB)."""
    _with_cell(course, student, """
k = get_ipython().kernel
header = dict(k.session.msg_header("stream"), pad=[[["x" * 100] * 100] * 100] * 8)
k.session.send(k.iopub_socket, "stream", {"name": "stdout", "text": "hi"},
               parent=k.get_parent("shell"), header=header)
print("sent")""")


def writes_many_files(course: Path, student: str) -> None:
    _with_cell(course, student, "for i in range(200_000):\n    open(f'f{i}', 'w').close()")


def writes_many_megabytes(course: Path, student: str) -> None:
    _with_cell(course, student, "for i in range(100):\n"
                                "    open(f'b{i}', 'wb').write(b'0' * 2**20)")


def replaces_its_notebook_with_a_fifo(course: Path, student: str) -> None:
    _with_cell(course, student, f"import os\nos.remove({NB!r})\nos.mkfifo({NB!r})")


def fills_memory_beyond_the_sandbox(course: Path, student: str) -> None:
    """0.9 GB written in a child process, then 1.9 GB in the kernel: each under the
    sandbox's 2.5 GB, together over it (only a control group sees the sum, and stops the
    kernel). The kernel holds the more, so the kernel is what the out-of-memory killer
    ends (with 1.3 GB in each, a CI run saw it end the child instead: the kernel went on and
    nothing was there to report). (Memory-backed folders no longer can: /tmp and /dev/shm
    hold at most the disk budget, ``k_tmp_disk``.)"""
    _with_cell(course, student, """
import os, time
if os.fork() == 0:
    held = b'2' * (900 * 2**20)
    time.sleep(60)
    os._exit(0)
time.sleep(1)
held = b'1' * (1900 * 2**20)
time.sleep(20)
print('survived')""")


def fills_tmp_past_the_disk_budget(course: Path, student: str) -> None:
    """12 MB in its folder and 12 MB in /tmp, deleted while held open (no walk over a
    folder sees it): each under the 20 MB disk budget, together over it."""
    _with_cell(course, student, """
import os, time
open('half.bin', 'wb').write(b'0' * 12 * 2**20)
f = open('/tmp/fill', 'wb')
os.unlink('/tmp/fill')
f.write(b'0' * 12 * 2**20)
f.flush()
time.sleep(20)
print('survived')""")


def starts_busy_processes(course: Path, student: str) -> None:
    """Eight detached processes that keep the CPU busy for 20 s while the notebook waits,
    beside whoever is graded at the same time (issue 32, class 4: an honest 2/5 became 0/5
    when such a job had the cores). The job's control group gets one fair share of the CPU
    whatever it starts, so the students graded beside it keep their exact scores."""
    _with_cell(course, student, """
import os, time
end = time.time() + 20
for _ in range(8):
    if os.fork() == 0:
        os.setsid()
        while time.time() < end:
            pass
        os._exit(0)
time.sleep(21)
print('burnt')""")


IPC_NOTE = "a note for whoever comes next"


def leaves_a_note_in_its_socket_folder(course: Path, student: str) -> None:
    _with_cell(course, student, f"""
import os, ipykernel
d = os.path.dirname(ipykernel.get_connection_file())
open(os.path.join(d, 'note.txt'), 'w').write({IPC_NOTE!r})
open(os.path.join(d, 'big.bin'), 'wb').write(b'0' * 2**20)""")


def replaces_its_sockets_with_links(course: Path, student: str) -> None:
    """Each of its sockets replaced with a link to the gradebook's PostgreSQL socket: the
    grading process (root) connecting again would have reached it, as root."""
    _with_cell(course, student, """
import json, os, ipykernel
d = os.path.dirname(ipykernel.get_connection_file())
res = {}
for name in sorted(os.listdir(d)):
    if name.startswith('k-'):
        p = os.path.join(d, name)
        try:
            os.unlink(p)
            os.symlink('/run/postgresql/.s.PGSQL.5432', p)
            res[name] = 'REPLACED'
        except OSError as e:
            res[name] = type(e).__name__
print('SOCKETS', json.dumps(res))""")


def lists_its_socket_folder(course: Path, student: str) -> None:
    _with_cell(course, student, """
import os, ipykernel
d = os.path.dirname(ipykernel.get_connection_file())
print('SOCKET FOLDER', sorted(os.listdir(d)))""")


Attack = Callable[[Path, str], None]

# name -> (builder, the outcome: "invalid" or "graded" with a score, what the reason says)
ATTACKS: dict[str, tuple[Attack, str, float | None, str]] = {
    "links": (links_to_everything, "graded", 8, "symbolic link"),
    "nb_link_solution": (notebook_links_to_the_solution, "invalid", 0, "symbolic link"),
    "nb_link_alice": (notebook_links_to_another_student, "invalid", 0, "symbolic link"),
    "nb_hard_link": (notebook_is_a_hard_link_to_the_solution, "invalid", 0, "hard link"),
    "nb_fifo": (notebook_is_a_fifo, "invalid", 0, "named pipe"),
    "folder_link": (student_folder_links_to_another, "invalid", 0, "symbolic link"),
    "nb_too_big": (notebook_over_the_size_limit, "invalid", 0, "over the limit of 2 MB"),
    "braces": (ten_million_braces, "invalid", 0, "JSON values"),
    "deep": (deep_json, "invalid", 0, "levels deep"),
    "many_files": (too_many_and_too_large_files, "graded", 8, "over the limit of 20 files"),
    "long_id": (long_id, "invalid", 0, "longer than 64 characters"),
    "formula_id": (formula_id, "invalid", 0, "not letters, digits"),
    "tamper_ids": (tampered_ids, "graded", 8, "nbgrader metadata"),
    "tamper_types": (tampered_types, "graded", 8, "nbgrader metadata"),
    "tamper_schema": (tampered_schema_and_points, "graded", 8, "nbgrader metadata"),
    "hidden_marker": (hidden_tests_marker_without_end, "graded", 8, ""),
    "prints_3mb": (prints_3_mb, "graded", 8, "output was cut"),
    "prints_10mb": (prints_10_mb_at_once, "graded", 8, "larger than the limit and was not read"),
    "huge_header": (sends_a_huge_message_header, "graded", 8, "larger than the limit and was not read"),
    "k_files": (writes_many_files, "graded", 8, "limit on what a notebook may write"),
    "k_disk": (writes_many_megabytes, "graded", 8, "limit on what a notebook may write"),
    "k_fifo": (replaces_its_notebook_with_a_fifo, "graded", 8, ""),
    "k_memory": (fills_memory_beyond_the_sandbox, "graded", 8, ""),
    "k_tmp_disk": (fills_tmp_past_the_disk_budget, "graded", 8, "limit on what a notebook may write"),
    "cpu_hog": (starts_busy_processes, "graded", 8, ""),
    "ipc_link": (replaces_its_sockets_with_links, "graded", 8, ""),
    "ipc_a_writer": (leaves_a_note_in_its_socket_folder, "graded", 8, ""),
    "ipc_b_reader": (lists_its_socket_folder, "graded", 8, ""),
}


def build(course: Path, names=None) -> None:
    """Write the attacks ``names`` (default: all) into ``course/submitted``."""
    for name in names or ATTACKS:
        ATTACKS[name][0](course, name)
