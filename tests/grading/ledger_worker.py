"""A grading worker stand-in for the ledger tests: claims jobs and "grades" each by sleeping.

    python -m tests.grading.ledger_worker DB_URL HOST LOG WORK_S LEASE_S [--wait]

Every step is appended to LOG as one line, written before the next step starts:
``claim S A N``, ``ok S A N`` / ``refused S A N`` (what complete() answered) and, on
Ctrl-C (SIGINT), ``released S A N True|False`` before exiting with 130. The stored outcome
is ``{"owner": ..., "attempts": N}``, so a test can tell which claim's grade was kept.
Without --wait the worker stops when nothing is claimable; with --wait it stops only when
nothing is pending or running (it waits for other workers' leases to run out).
"""
from __future__ import annotations

import os
import sys
import time

from grader.grading.run.ledger import Ledger


def main(argv: list[str]) -> int:
    url, host, log, work_s, lease_s = argv[:5]
    wait = "--wait" in argv[5:]
    owner = f"{host}:{os.getpid()}:0"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(*words: object) -> None:
        os.write(fd, (" ".join(map(str, words)) + "\n").encode())

    ledger = Ledger(url)
    job = None
    try:
        while True:
            job = ledger.claim(owner, float(lease_s))
            if job is None:
                counts = ledger.counts()
                if not wait or counts["pending"] + counts["running"] == 0:
                    return 0
                time.sleep(0.05)
                continue
            note("claim", job.student, job.assignment, job.attempts)
            time.sleep(float(work_s))
            ok = ledger.complete(job, owner, {"owner": owner, "attempts": job.attempts})
            note("ok" if ok else "refused", job.student, job.assignment, job.attempts)
            job = None
    except KeyboardInterrupt:
        if job is not None:
            note("released", job.student, job.assignment, job.attempts,
                 ledger.release(job, owner))
        return 130
    finally:
        ledger.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
