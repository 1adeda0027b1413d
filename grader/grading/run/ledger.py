"""The grading ledger: which (student, assignment) jobs are pending, running or done.

It lives in the same database as nbgrader's gradebook (the same SQLAlchemy URL), so that

* an interrupted run (Ctrl-C, a killed machine) is finished by running it again: done jobs
  keep their stored outcome and are not graded again, running jobs of a dead worker go back
  to pending (:meth:`Ledger.release_dead` on the same host, lease expiry elsewhere);
* several grading processes, on one machine or on several sharing one PostgreSQL
  database, never grade the same job at once and never lose one: :meth:`Ledger.claim`
  takes one row atomically (PostgreSQL ``SELECT ... FOR UPDATE SKIP LOCKED``; SQLite
  ``BEGIN IMMEDIATE``, one writer at a time, waiting up to 60 s for a busy database).

A claim is a lease: the worker renews it while it grades (:meth:`Ledger.renew`). A row
whose lease ran out can be claimed by anyone. Every claim increments ``attempts``, which is
the fencing token: :meth:`Ledger.complete`, :meth:`renew` and :meth:`release` only act
while the row is still ``running`` under the same owner *and* the same attempt, so a worker
that was taken over (or whose submission changed under it) cannot write a second grade.

Lease times are taken from the database server's clock on PostgreSQL (so machines with
skewed clocks agree) and from this machine's clock on SQLite (one machine anyway).

A job can fail for reasons that are not the submission's: its worker crashed or was killed
(:meth:`Ledger.fault` by the parent, :meth:`release_dead`), froze past its lease (a
:meth:`claim` of an expired lease), or the machine ran out of memory. Each is counted in
the job's note (``faults`` and the last reason, kept in ``outcome`` until the job is done)
and the job goes back to the queue, behind the jobs claimed fewer times; the worker that
claims a job with too many faults records it as failed with that reason
(:mod:`grader.grading.run.worker`) instead of grading it forever.

A job's ``sha256`` covers the submission and every other input of its verdict; ``inputs``
keeps the digests of those other inputs (:mod:`.inputs`: source, hidden checks, grader,
limits, secret), so that :meth:`Ledger.sync` can say which changed and the pipeline can
refuse a report that mixes verdicts of different inputs (:meth:`Ledger.done_inputs`).

Create one :class:`Ledger` per process (an engine must not cross a ``fork``).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import PurePath
from typing import Any, Callable, Iterable, Sequence

from sqlalchemy import (Column, DateTime, Integer, MetaData, String, Table, Text, and_,
                        create_engine, event, func, inspect, select, text, true, tuple_, update)
from sqlalchemy.engine import Connection, Engine

from ..sandbox.procs import alive

__all__ = ["Job", "Reset", "Ledger", "STATES", "TABLE", "owner_id", "pid_alive"]

TABLE = "course_grading_jobs"
STATES = ("pending", "running", "done")
_LOCK_KEY = 0x6C656467  # pg_advisory_xact_lock key for creating the tables ("ledg")

metadata = MetaData()
jobs = Table(
    TABLE, metadata,
    Column("student", String(255), primary_key=True),
    Column("assignment", String(255), primary_key=True),
    Column("sha256", String(64), nullable=False),          # of the submitted files
    Column("state", String(16), nullable=False),           # pending | running | done
    Column("owner", String(255)),                          # "host:pid:slot" while running
    Column("lease_until", DateTime()),                     # UTC, naive
    Column("attempts", Integer, nullable=False),           # claims so far (fencing token)
    Column("outcome", Text),        # JSON of the pipeline's Outcome when done; else a fault note
    Column("updated_at", DateTime(), nullable=False),      # UTC, naive
    Column("inputs", Text),         # JSON of the verdict's other inputs' digests (.inputs)
)


@dataclass(frozen=True)
class Reset:
    """A job :meth:`Ledger.sync` sent back to pending: its state then, and its inputs then
    and now (JSON, :mod:`.inputs`; None where not recorded)."""
    student: str
    assignment: str
    state: str
    inputs_before: str | None
    inputs: str | None


@dataclass(frozen=True)
class Job:
    """One claimed job; ``attempts`` identifies this claim (see the module docstring);
    ``faults`` earlier claims of it ended in a fault, the last for ``fault``."""
    student: str
    assignment: str
    sha256: str
    attempts: int
    faults: int = 0
    fault: str = ""


def _note(row_outcome: str | None) -> tuple[int, str]:
    """(faults, last reason) from the note of a job that is not done."""
    try:
        d = json.loads(row_outcome or "{}")
        return int(d.get("faults", 0)), str(d.get("fault", ""))
    except (ValueError, TypeError, AttributeError):
        return 0, ""


def _noted(faults: int, reason: str) -> str:
    return json.dumps({"faults": faults, "fault": reason})


LOST_LEASE = ("its grading worker stopped renewing its lease (it crashed, was killed or froze) "
              "while grading it")
DEAD_WORKER = "its grading worker was gone (killed or crashed) while grading it"


def _json_default(value: Any) -> Any:
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"ledger: the outcome holds a {type(value).__name__} ({value!r}), which "
                    "cannot be stored as JSON; pass plain values (dataclasses.asdict(outcome))")


class Ledger:
    """The job table in the gradebook database at ``db_url`` (created when missing)."""

    def __init__(self, db_url: str):
        self.db_url = db_url
        if db_url.startswith("sqlite"):
            # A busy database waits (60 s) instead of failing at once; transactions are
            # begun by us with BEGIN IMMEDIATE (pysqlite's own handling would defer it).
            self.engine: Engine = create_engine(db_url, connect_args={"timeout": 60})
            event.listen(self.engine, "connect", _sqlite_autocommit_driver)
            event.listen(self.engine, "begin", _sqlite_begin_immediate)
        else:
            self.engine = create_engine(db_url, pool_pre_ping=True)
        self.postgres = self.engine.dialect.name == "postgresql"
        if not self.postgres and self.engine.dialect.name != "sqlite":
            raise ValueError(f"ledger: database {self.engine.dialect.name!r} is not supported; "
                             "use sqlite:///... or postgresql://... in exercises/course.toml")
        self._create()

    # -- set-up -------------------------------------------------------------------------
    def _create(self) -> None:
        with self.engine.begin() as conn:
            if self.postgres:  # two machines starting at once must not both CREATE TABLE
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            names = inspect(conn).get_table_names()
            if not names:
                _nbgrader_schema(conn)
            if TABLE not in names:
                metadata.create_all(conn)
            elif "inputs" not in {c["name"] for c in inspect(conn).get_columns(TABLE)}:
                # a ledger made before the inputs were recorded: its rows hold NULL, and
                # sync sends them back to pending (their digests changed)
                conn.execute(text(f"ALTER TABLE {TABLE} ADD COLUMN inputs TEXT"))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- time ---------------------------------------------------------------------------
    def _now(self):
        if self.postgres:
            return func.timezone("UTC", func.clock_timestamp(), type_=DateTime())
        return datetime.now(timezone.utc).replace(tzinfo=None)

    def _later(self, seconds: float):
        return self._now() + timedelta(seconds=float(seconds))

    # -- the API ------------------------------------------------------------------------
    def sync(self, items: Iterable[Sequence[str]]) -> list[Reset]:
        """Record the submissions ``(student, assignment, sha256[, inputs])``: new ones as
        pending; one whose digest changed (a resubmission, or other hidden checks, limits,
        grader...) goes back to pending, its outcome cleared. Rows not named stay as they
        are. Returns the jobs sent back."""
        wanted = {(it[0], it[1]): (it[2], it[3] if len(it) > 3 else None) for it in items}
        resets = []
        with self.engine.begin() as conn:
            have = {(r.student, r.assignment): r for r in conn.execute(
                select(jobs.c.student, jobs.c.assignment, jobs.c.sha256, jobs.c.state,
                       jobs.c.inputs))}
            now = conn.scalar(select(self._now())) if self.postgres else self._now()
            new = [dict(student=s, assignment=a, sha256=h, state="pending", attempts=0,
                        updated_at=now, inputs=i)
                   for (s, a), (h, i) in wanted.items() if (s, a) not in have]
            if new:
                # another machine may insert the same rows at the same time: keep theirs
                conn.execute(self._insert().on_conflict_do_nothing(), new)
            for (s, a), (h, i) in wanted.items():
                row = have.get((s, a))
                if row is not None and row.sha256 != h:
                    n = conn.execute(update(jobs).where(self._key(s, a), jobs.c.sha256 != h).values(
                        sha256=h, state="pending", owner=None, lease_until=None, outcome=None,
                        updated_at=now, inputs=i)).rowcount
                    if n:
                        resets.append(Reset(s, a, row.state, row.inputs, i))
        return resets

    def claim(self, owner: str, lease_s: float,
              only: Iterable[Sequence[str]] | None = None) -> Job | None:
        """Take one pending job, or a running one whose lease ran out (a fault: see the
        module docstring); None if there is none. Jobs claimed fewer times come first.
        ``only``: (student, assignment) pairs to choose from (None: any job)."""
        claimable = (jobs.c.state == "pending") | (
            (jobs.c.state == "running") & (jobs.c.lease_until < self._now()))
        if only is not None:
            claimable = and_(claimable, tuple_(jobs.c.student, jobs.c.assignment).in_(
                [(s, a) for s, a in only]))
        query = (select(jobs.c.student, jobs.c.assignment, jobs.c.sha256, jobs.c.attempts,
                        jobs.c.state, jobs.c.outcome)
                 .where(claimable)
                 .order_by(jobs.c.attempts, jobs.c.assignment, jobs.c.student).limit(1))
        if self.postgres:
            query = query.with_for_update(skip_locked=True)
        with self.engine.begin() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            faults, fault = _note(row.outcome)
            if row.state == "running":
                faults, fault = faults + 1, LOST_LEASE
            done = conn.execute(update(jobs).where(
                self._key(row.student, row.assignment), jobs.c.attempts == row.attempts).values(
                state="running", owner=owner, lease_until=self._later(lease_s),
                attempts=row.attempts + 1, updated_at=self._now(),
                outcome=_noted(faults, fault) if faults else None))
            if done.rowcount != 1:  # cannot happen under the row lock / write lock
                raise RuntimeError(f"ledger: claim of {row.student}/{row.assignment} raced")
            return Job(row.student, row.assignment, row.sha256, row.attempts + 1, faults, fault)

    def job(self, student: str, assignment: str) -> Job | None:
        """The job as it stands now (its latest claim), e.g. to complete it for a worker that
        was stopped; :meth:`complete` still checks that the claim is the owner's."""
        with self.engine.begin() as conn:
            r = conn.execute(select(jobs.c.sha256, jobs.c.attempts, jobs.c.state, jobs.c.outcome)
                             .where(self._key(student, assignment))).first()
        if r is None:
            return None
        return Job(student, assignment, r.sha256, r.attempts,
                   *(_note(r.outcome) if r.state != "done" else (0, "")))

    def renew(self, job: Job, owner: str, lease_s: float) -> bool:
        """Extend this claim's lease (a heartbeat); False if the job is no longer ours."""
        return self._update_ours(job, owner, lease_until=self._later(lease_s))

    def complete(self, job: Job, owner: str, outcome: dict) -> bool:
        """Store the outcome and mark the job done, only if this claim still holds it."""
        payload = json.dumps(outcome, sort_keys=True, default=_json_default)
        return self._update_ours(job, owner, state="done", outcome=payload, lease_until=None)

    def release(self, job: Job, owner: str) -> bool:
        """Give the job back (Ctrl-C): pending again. False if it was no longer ours."""
        return self._update_ours(job, owner, state="pending", owner=None, lease_until=None)

    def fault(self, job: Job, owner: str, reason: str) -> int | None:
        """This claim ended in a fault that is not the submission's (``reason``): the job
        goes back to the queue with one fault more. Returns the job's faults now, None if
        the claim was no longer ``owner``'s."""
        faults = job.faults + 1
        ok = self._update_ours(job, owner, state="pending", owner=None, lease_until=None,
                               outcome=_noted(faults, reason))
        return faults if ok else None

    def release_dead(self, host: str, alive: Callable[[int], bool]) -> int:
        """Running jobs of workers on ``host`` whose pid is not ``alive`` go back to pending
        with one fault more (a killed run on this machine need not wait for its leases).
        Returns how many."""
        freed = 0
        with self.engine.begin() as conn:
            rows = conn.execute(select(jobs.c.student, jobs.c.assignment, jobs.c.owner,
                                       jobs.c.attempts, jobs.c.outcome)
                                .where(jobs.c.state == "running",
                                       jobs.c.owner.startswith(host + ":", autoescape=True))).all()
            for r in rows:
                o_host, pid, _slot = _parse_owner(r.owner)
                if o_host != host or pid is None or alive(pid):
                    continue
                faults = _note(r.outcome)[0] + 1
                freed += conn.execute(update(jobs).where(
                    self._key(r.student, r.assignment), jobs.c.state == "running",
                    jobs.c.owner == r.owner, jobs.c.attempts == r.attempts).values(
                    state="pending", owner=None, lease_until=None,
                    outcome=_noted(faults, DEAD_WORKER), updated_at=self._now())).rowcount
        return freed

    def counts(self) -> dict[str, int]:
        """``{"pending": n, "running": n, "done": n}``."""
        with self.engine.begin() as conn:
            got = dict(conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state)).all())
        return {s: int(got.get(s, 0)) for s in STATES}

    def results(self) -> list[dict]:
        """The stored outcomes of done jobs, ordered by assignment and student."""
        with self.engine.begin() as conn:
            rows = conn.execute(select(jobs.c.student, jobs.c.assignment, jobs.c.outcome)
                                .where(jobs.c.state == "done")
                                .order_by(jobs.c.assignment, jobs.c.student)).all()
        out = []
        for r in rows:
            d = json.loads(r.outcome) if r.outcome else {}
            d.setdefault("student", r.student)
            d.setdefault("assignment", r.assignment)
            out.append(d)
        return out

    def done_inputs(self) -> dict[tuple[str, str], str | None]:
        """``{(student, assignment): inputs}`` of the done jobs (JSON, :mod:`.inputs`)."""
        with self.engine.begin() as conn:
            return {(r.student, r.assignment): r.inputs for r in conn.execute(
                select(jobs.c.student, jobs.c.assignment, jobs.c.inputs)
                .where(jobs.c.state == "done"))}

    def forget(self, student: str | None = None, assignment: str | None = None) -> int:
        """Make jobs pending again, outcome cleared, so they are regraded (None: any).
        A worker still grading one of them cannot complete it. Returns how many."""
        cond = [jobs.c.student == student] if student is not None else []
        cond += [jobs.c.assignment == assignment] if assignment is not None else []
        with self.engine.begin() as conn:
            return conn.execute(update(jobs).where(and_(true(), *cond)).values(
                state="pending", owner=None, lease_until=None, outcome=None,
                updated_at=self._now())).rowcount

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _key(student: str, assignment: str):
        return and_(jobs.c.student == student, jobs.c.assignment == assignment)

    def _insert(self):
        if self.postgres:
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(jobs)

    def _update_ours(self, job: Job, me: str, **values: Any) -> bool:
        with self.engine.begin() as conn:
            res = conn.execute(update(jobs).where(
                self._key(job.student, job.assignment), jobs.c.state == "running",
                jobs.c.owner == me, jobs.c.attempts == job.attempts,
                jobs.c.sha256 == job.sha256).values(updated_at=self._now(), **values))
            return res.rowcount == 1


def owner_id(slot: int, host: str | None = None) -> str:
    """The owner string of worker ``slot`` in this process: ``"host:pid:slot"``."""
    import socket
    return f"{host or socket.gethostname()}:{os.getpid()}:{slot}"


pid_alive = alive   # whether a process with this pid exists here (for release_dead)


def _parse_owner(owner: str | None) -> tuple[str, int | None, str]:
    host, _, rest = (owner or "").partition(":")
    pid, _, slot = rest.partition(":")
    return host, int(pid) if pid.isdigit() else None, slot


def _nbgrader_schema(conn: Connection) -> None:
    """On an empty database, create nbgrader's gradebook first, as nbgrader would: it
    stamps its alembic version only when it finds no table at all, so a ledger table
    created first would leave the gradebook unversioned (``nbgrader db upgrade`` fails)."""
    try:
        from nbgrader.api import Base
    except ImportError:  # the ledger alone, without nbgrader: nothing to protect
        return
    Base.metadata.create_all(conn)
    conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
    conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"),
                 {"v": _nbgrader_alembic_head()})


@functools.cache
def _nbgrader_alembic_head() -> str:
    """nbgrader's current schema version, read in this process (nbgrader's own
    get_alembic_version runs an ``alembic`` executable found on PATH)."""
    import nbgrader
    from alembic.script import ScriptDirectory
    return ScriptDirectory(os.path.join(os.path.dirname(nbgrader.__file__), "alembic")
                           ).get_current_head()


def _sqlite_autocommit_driver(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None


def _sqlite_begin_immediate(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")
