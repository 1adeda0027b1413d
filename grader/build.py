"""Build the executed HTML book: ``python -m grader.build`` (what ``make book`` runs).

The build fails on any warning (a broken reference, a page missing from the table of
contents, a cell that raises). Execution results are cached in ``_build/.jupyter_cache``,
so a rebuild only runs the chapters that changed.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def code_fingerprint(root: Path) -> str:
    """Hash of what chapters execute besides their own cells: the grader package, the
    scripts chapters launch (``chapters/**/*.py``, e.g. ``chapters/scripts/ddp_torch.py``)
    and the pinned environment. jupyter-cache keys only on a notebook's cells, so when this
    changes the execution cache is cleared and every chapter runs again."""
    h = hashlib.sha256()
    files = (sorted((root / "grader").rglob("*.py")) + sorted((root / "chapters").rglob("*.py"))
             + [root / "constraints.txt"])
    for f in files:
        if f.exists():
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def refresh_cache(root: Path, builddir: Path) -> bool:
    """Clear the execution cache if the code fingerprint changed; True if it was cleared."""
    stamp = builddir / ".code-fingerprint"
    now = code_fingerprint(root)
    if stamp.exists() and stamp.read_text() == now:
        return False
    shutil.rmtree(builddir / ".jupyter_cache", ignore_errors=True)
    builddir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(now)
    return True


def build_command(root: Path, builddir: Path | None = None, strict: bool = True) -> list[str]:
    jb = Path(sys.executable).with_name("jupyter-book")
    # --all: re-read every page, so warnings are never hidden by Sphinx's incremental build
    # (execution stays cached; re-reading costs seconds).
    cmd = [str(jb), "build", str(root), "--builder", "html", "--all"]
    if builddir is not None:
        cmd += ["--path-output", str(builddir)]
    if strict:
        cmd += ["--warningiserror", "--nitpick", "--keep-going"]
    return cmd


def build_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the book build (and so every kernel and launched script) runs in."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # a debugger warning, not ours
    env.setdefault("GLOG_minloglevel", "2")
    # Paddle warns at import, in every process a launcher starts, that this machine has no
    # ccache (for compiling custom operators), with the path of its own install: the build
    # machine's notice, not the reader's.
    env.setdefault("PYTHONWARNINGS", "ignore:No ccache found:UserWarning")
    env["COURSE_BOOK_BUILD"] = "1"  # chapters render static views of live widgets
    # Figures are shown by the kernels' inline backend: a non-interactive backend chosen for
    # this process (as grading and GPU-cell runs choose "Agg") would leave the pages bare.
    env.pop("MPLBACKEND", None)
    # Chapters start scripts the way a reader does (`!torchrun ...`,
    # `!python -m paddle.distributed.launch ...`): the environment's own commands come
    # first on PATH even when it is not activated.
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    return env


@contextlib.contextmanager
def one_build_at_a_time(root: Path):
    """Hold the book's folder for one build: its pages run in the book's own folders (the
    chapters' ``_runs``, the execution cache), so a second build of the same book waits for
    the first to end (it then finds the pages cached) instead of running them beside it,
    where the two overwrite each other's runs. A lock on the folder itself (``flock``),
    released when the build ends, however it ends."""
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another build of {root} is running: waiting for it to end", file=sys.stderr,
                  flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def build(root: Path = ROOT, builddir: Path | None = None, strict: bool = True,
          quiet: bool = False) -> float:
    """Build the book; return the seconds it took. Raises CalledProcessError on failure.
    Builds of one book run one at a time (:func:`one_build_at_a_time`)."""
    with one_build_at_a_time(Path(root)):
        return _build(root, builddir, strict, quiet)


def _build(root: Path, builddir: Path | None, strict: bool, quiet: bool) -> float:
    env = build_env()
    # jupyter-book writes into <path-output>/_build (the book root's _build by default)
    refresh_cache(root, (builddir or root) / "_build")
    # The pages' temporary files go into a folder of this build's, removed after it: what
    # torchrun keeps of every launch (a torchelastic_* folder), the traces and runs a page
    # writes with tempfile, the folders of CPU workers a stopped kernel took along.
    scratch = tempfile.mkdtemp(prefix="course-book-tmp-")
    env["TMPDIR"] = scratch
    t0 = time.perf_counter()
    try:
        out = subprocess.run(build_command(root, builddir, strict), env=env, cwd=root,
                             stdout=subprocess.PIPE if quiet else None,
                             stderr=subprocess.STDOUT if quiet else None, text=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - t0
    if out.returncode:
        if quiet:
            print(out.stdout[-20000:], file=sys.stderr)
        raise subprocess.CalledProcessError(out.returncode, out.args)
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--builddir", type=Path, default=None)
    ap.add_argument("--no-strict", action="store_true", help="do not fail on warnings")
    args = ap.parse_args()
    try:
        seconds = build(ROOT, args.builddir, not args.no_strict)
    except subprocess.CalledProcessError:
        print("book build failed: see the messages above (a warning counts as an error)",
              file=sys.stderr)
        return 1
    out = (args.builddir or ROOT) / "_build" / "html" / "index.html"
    print(f"book built in {seconds:.1f} s: open {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
