"""nbgrader's exchange collect (the hub's *Collect*, ``nbgrader collect``) with whose and
when taken from the system, not from the names a student's submission gives itself.

A submission in the exchange is a folder ``inbound/<student>+<assignment>+<time>+<random>``
that the student's own ``nbgrader submit`` made, with a ``timestamp.txt`` inside: the student
id and the time are bytes the student wrote. nbgrader's :class:`ExchangeCollect` files the
folder under that student id, keeps the newest by that time and copies that
``timestamp.txt`` (what late penalties read); where the folder's owner is not the student it
names, it only logs "cheating attempt?" and collects it anyway. So a student could file
work under another student's id, with a far-future time, and replace that student's
submission. :class:`OwnedCollect` (the course's ``nbgrader_config.py`` installs it):

- with ``check_owner`` (nbgrader's default: a hub where each account is a system user), a
  folder whose owner is not the student it names is **refused**: logged as an error naming
  both, never collected, and never hiding that student's own submissions;
- the time is the folder's status-change time (``st_ctime``), which the kernel sets when
  the submission is written and a student cannot set back (only later, by touching the
  folder again); the name's time and the ``timestamp.txt`` inside are not used, and the
  ``timestamp.txt`` collected says the system's time.

Where every account is one system user (the demo hub: ``check_owner`` off,
``hub/singleuser/nbgrader_config.py``), the owner says nothing; see exercises/GRADING.md.
"""
from __future__ import annotations

import datetime
import os

from nbgrader.exchange.default.collect import ExchangeCollect

try:
    import pwd
except ImportError:       # (Windows: nbgrader's owner check is off there too)
    pwd = None             # type: ignore[assignment]

__all__ = ["OwnedCollect"]

_REFUSED = "\0refused:"       # no student id holds a NUL


class OwnedCollect(ExchangeCollect):
    def _path_to_record(self, path):
        rec = super()._path_to_record(path)
        st = os.lstat(path)
        # naive UTC, as nbgrader's parse_utc gives and the gradebook's due dates are
        rec["timestamp"] = datetime.datetime.fromtimestamp(
            st.st_ctime, datetime.timezone.utc).replace(tzinfo=None)
        if self.check_owner and pwd is not None:
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = f"uid {st.st_uid}"
            if owner != rec["username"]:
                self.log.error(f"{path} says it is {rec['username']!r}'s submission but is "
                               f"owned by {owner!r}: not collected")
                # a group of its own, dropped below: it is never that student's newest (or
                # last before the due date) in place of their own submissions
                rec["username"] = _REFUSED + rec["filename"]
        return rec

    def init_src(self):
        super().init_src()
        kept = [rec for rec in self.src_records if not rec["username"].startswith(_REFUSED)]
        self.src_records = kept
        self._times = {rec["filename"]: rec["timestamp"] for rec in kept}

    def do_copy(self, src, dest, log=None):
        super().do_copy(src, dest, log=log)
        when = self._times.get(os.path.basename(os.path.normpath(src)))
        if when is not None:
            with open(os.path.join(dest, "timestamp.txt"), "w") as f:
                f.write(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
