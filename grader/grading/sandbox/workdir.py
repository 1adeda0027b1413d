"""What a kernel leaves in its folder is not kept: ``autograded/<student>/<assignment>``
holds the graded notebook and the files nbgrader copied there, nothing the kernel made.

The kernel runs in that folder and can write there (under the sandbox's limits on files
and bytes). Before nbgrader writes the graded notebook (as root) and before the feedback
copies the folder, :func:`restore` removes, never following a link, every entry that was
not there when the kernel started or that changed since (a named pipe in place of the
notebook would block nbgrader's write; 200,000 small files kept nbgrader's quadratic file
listing busy for 13 minutes; a link would be copied into the released feedback), and
:func:`keep_only` leaves only the named files at the end of grading.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Callable

__all__ = ["snapshot", "restore", "keep_only"]

_MOST = 100_000   # entries a snapshot records (a submission holds far fewer)


def _key(st: os.stat_result) -> tuple:
    if stat.S_ISDIR(st.st_mode):   # a folder changes when its entries do: those are checked
        return (st.st_dev, st.st_ino, stat.S_IFDIR)
    return (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)


def _entries(folder: str, prefix: str = ""):
    """``(relative path, absolute path, lstat)`` of each entry directly in ``folder``."""
    try:
        it = os.scandir(folder)
    except OSError:
        return
    with it:
        items = list(it)
    for e in items:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        yield prefix + e.name, e.path, st


def snapshot(folder: str | Path) -> dict[str, tuple]:
    """What is in ``folder`` now: ``{relative path: (device, inode, type, size, mtime)}``."""
    out: dict[str, tuple] = {}
    todo = [(str(folder), "")]
    while todo and len(out) < _MOST:
        path, prefix = todo.pop()
        for rel, full, st in _entries(path, prefix):
            out[rel] = _key(st)
            if stat.S_ISDIR(st.st_mode):
                todo.append((full, rel + "/"))
    return out


def _prune(folder: str | Path, keep: Callable[[str, os.stat_result], bool]) -> int:
    """Remove every entry below ``folder`` that ``keep`` refuses (a folder with everything
    in it), never following a link; give what stays back to this process's user. Returns
    how many entries were removed at the top of what went."""
    removed, todo = 0, [(str(folder), "")]
    me = os.geteuid()
    while todo:
        path, prefix = todo.pop()
        for rel, full, st in _entries(path, prefix):
            if keep(rel, st):
                if me == 0 and st.st_uid != 0:
                    os.lchown(full, 0, 0)
                if stat.S_ISDIR(st.st_mode):
                    todo.append((full, rel + "/"))
                continue
            removed += 1
            try:
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(full)   # does not follow links (fd-based on Linux)
                else:
                    os.unlink(full)
            except FileNotFoundError:
                pass
    return removed


def restore(folder: str | Path, before: dict[str, tuple]) -> int:
    """Remove what the kernel made or changed in ``folder`` since :func:`snapshot` gave
    ``before``. Returns how many entries went."""
    return _prune(folder, lambda rel, st: before.get(rel) == _key(st))


def keep_only(folder: str | Path, names: set[str]) -> int:
    """Leave in ``folder`` only the regular files (one name each) named in ``names``
    (relative paths) and the folders that hold them."""
    dirs = {str(Path(n).parent) for n in names} | {p for n in names for p in
                                                   map(str, Path(n).parents)}

    def keep(rel: str, st: os.stat_result) -> bool:
        if stat.S_ISDIR(st.st_mode):
            return rel in dirs
        return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and rel in names

    return _prune(folder, keep)
