"""The write-ahead journal: SQLite in WAL mode, one row per dispatch, per transition, per job, per handoff.

Every row is committed before the side effect it announces, so a router killed at any point can finish
or undo the step when it restarts. Many processes may read the journal; one router drives it at a time
(an flock on ``<journal>.lock``, released by the kernel if the holder dies). It never talks to SLURM.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sqlite3
import time
from collections.abc import Container, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from fellows_fsm.core import Attach, Record, Step
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.vocab import (
    FELLOWS,
    HANDED_OFF,
    HANDING_OFF,
    HANDOFF_FAILED,
    OUTCOME_HANDED_OFF,
    OUTCOME_HANDOFF_FAILED,
)
from fellows_fsm.errors import JournalBusy, JournalError
from fellows_fsm.journal_schema import (
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    DispatchRow,
    HandoffRow,
    JobRow,
    Listing,
)
from fellows_fsm.journal_schema import dispatch_row as _dispatch_row
from fellows_fsm.scheduler import JobSpec
from fellows_fsm.statefs import refuse_network_fs

__all__ = ["DispatchRow", "DriverOwner", "HandoffRow", "JobRow", "Journal", "Listing", "lock_held"]


class Journal:
    """The SQLite journal at ``path``; also the lifecycle's Recorder for the dispatches it drives."""

    _lock_file: Any = None
    """The open driver lock file while this Journal holds the lock."""
    _owner: DriverOwner | None = None
    last_watched: float | None = None
    """When the journal's previous driver last ticked (read from the lock file as the lock is taken)."""

    def __init__(self, path: Path | str, *, readonly: bool = False, allow_network_fs: bool = False) -> None:
        """Open (or create) the journal at ``path``; ``readonly`` opens an existing one to read only.

        A journal this user cannot write is refused for driving with a message that says so (not "corrupt":
        that advice would orphan its live jobs), and still opens read-only for status and history. So is one on
        a network filesystem (statefs.py), unless ``allow_network_fs``: then SQLite keeps a rollback journal,
        not WAL (which needs shared memory on one host).
        """
        self.path = Path(path)
        self.wal = readonly or _wal_ok(self.path, allow_network_fs=allow_network_fs)
        readonly = readonly and self.path.exists()  # a journal that does not exist yet is created, empty
        self.readonly = readonly
        self._batching = False
        self._identity: tuple[int, int] | None = None
        if not readonly and self.path.exists() and not _writable(self.path):
            raise JournalError(
                f"journal {self.path} is read-only for this user; its dispatches can be read (status, history) but "
                "not driven: fix the permissions of the file and its folder, or run as the user who owns it"
            )
        setup = None
        try:
            if readonly:
                self._db = _open_readonly(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Two processes opening a new journal at once (two shells' submits) would both create it; WAL mode
                # and the schema are set up under an flock of their own, one process after the other.
                setup = open(self.path.with_name(self.path.name + ".setup-lock"), "a", encoding="utf-8")  # noqa: SIM115
                fcntl.flock(setup, fcntl.LOCK_EX)
                self._db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
            self._db.row_factory = sqlite3.Row
            # Read and check before any write (WAL mode rewrites the header): a refused file stays as it was.
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION, *MIGRATIONS) or (readonly and version == 0):
                self._db.close()
                raise JournalError(
                    f"journal {self.path} has schema version {version}, this fellows-fsm reads "
                    f"{SCHEMA_VERSION}; use the fellows-fsm that wrote it, or drive it once with this one to upgrade it"
                )
            tables = self._db.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
            if version == 0 and tables:
                self._db.close()
                raise JournalError(
                    f"journal {self.path} is an SQLite file but not a fellows-fsm journal; "
                    "point state_dir elsewhere or move the file aside"
                )
            if not readonly:
                self._db.execute(f"PRAGMA journal_mode={'WAL' if self.wal else 'DELETE'}")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA foreign_keys=ON")
                if version == 0:
                    self._db.executescript(SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION};")
                for old in range(version, SCHEMA_VERSION) if version else ():
                    self._db.executescript(f"BEGIN; {MIGRATIONS[old]} PRAGMA user_version={old + 1}; COMMIT;")
            self._db.execute("SELECT count(*) FROM dispatches").fetchone()
            if not readonly and version:
                # Before anything this process writes (and before any sbatch it would journal): a damaged page
                # refuses the command here, not after its job was queued. Readers keep reading what they can.
                self._check_pages()
            self._identity = _identity(self.path)
        except sqlite3.DatabaseError as exc:
            self._close_refused()
            raise _damaged(self.path, exc) from None
        except OSError as exc:
            self._close_refused()
            raise JournalError(f"journal {self.path} cannot be opened: {exc}") from None
        finally:
            if setup is not None:
                setup.close()  # releases the flock

    def _check_pages(self) -> None:
        """Raise sqlite3.DatabaseError if SQLite's quick_check finds a damaged page (every page is read once)."""
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check(3)").fetchall()]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError("; ".join(problems).replace("\n", " "))

    def check_intact(self) -> None:
        """Raise JournalError if the journal file was deleted or replaced since it was opened.

        SQLite would go on writing into the unlinked file, and every later reader would see nothing.
        """
        if self._identity is not None and _identity(self.path) != self._identity:
            live = [f"{r.id} (SLURM job {r.job_id or '-'})" for r in self.dispatches(live_only=True)]
            jobs = "; its live dispatches were " + ", ".join(live) if live else ""
            raise JournalError(
                f"journal {self.path} was deleted or replaced while this router drove it; stopped without touching "
                f"the cluster{jobs}: restore the file, or cancel those jobs with scancel"
            )

    def _close_refused(self) -> None:
        """Close the connection of a journal being refused (Python 3.13 warns about one left open)."""
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    # ----------------------------------------------------------------- the driver lock
    @property
    def lock_path(self) -> Path:
        """The file whose flock marks the one router that drives this journal."""
        return self.path.with_name(self.path.name + ".lock")

    def acquire_driver(self, *, kind: str = "in-process", log: str | None = None, at: float | None = None) -> None:
        """Become the one router driving this journal, or raise JournalBusy naming the holder.

        The lock file then holds the owner's record (pid, host, since, kind, log, last tick: ``DriverOwner``),
        which outlives the owner: the next driver reads from it when the journal was last watched.
        """
        if self._lock_file is not None:
            return
        handle = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the process lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = DriverOwner.parse(handle.read())
            handle.close()
            holder = owner.describe() if owner is not None else "an unknown process"
            raise JournalBusy(
                holder,
                f"journal {self.path} is driven by another router ({holder}); stop it, or read with "
                "`fellows-fsm status`",
            ) from None
        handle.seek(0)
        previous = DriverOwner.parse(handle.read())
        self.last_watched = previous.last_tick if previous is not None else None
        self._lock_file = handle
        self._owner = DriverOwner(
            pid=os.getpid(),
            host=socket.gethostname(),
            since=time.time() if at is None else at,
            kind=kind,
            log=log,
            last_tick=self.last_watched,
        )
        self._write_owner()

    def beat(self, at: float) -> None:
        """Note in the owner record that the driver ticked at ``at`` (what the next driver counts as watched)."""
        if self._lock_file is not None and self._owner is not None:
            self._owner = attrs.evolve(self._owner, last_tick=at)
            self._write_owner()

    def _write_owner(self) -> None:
        handle, owner = self._lock_file, self._owner
        assert handle is not None
        assert owner is not None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(owner.dump())
            handle.flush()
        except OSError:
            pass  # the record is for people and the next driver; a full disk must not stop the walk

    @property
    def driving(self) -> bool:
        """True while this Journal holds the driver lock."""
        return self._lock_file is not None

    def owner(self) -> DriverOwner | None:
        """The driver lock's owner record as the lock file has it (of a live driver, or of the last one)."""
        try:
            return DriverOwner.parse(self.lock_path.read_text(encoding="utf-8"))
        except OSError:
            return None

    def driver_alive(self) -> bool:
        """Does some process hold the driver lock now (this one included)? A probe: it never keeps the lock."""
        if self._lock_file is not None:
            return True
        return lock_held(self.lock_path)

    def release_driver(self) -> None:
        """Stop driving the journal (the lock is also released when the process dies)."""
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
            self._owner = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock and close the database."""
        self.release_driver()
        self._db.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes in one transaction, committed on exit (each write is still its own savepoint).

        Only for steps that announce no side effect of their own (parks): a side effect must never run
        before its row is committed. If the commit fails, JournalError is raised and none of the batch is kept.
        """
        if self._batching:
            yield
            return
        self._batching = True
        try:
            with self._transaction():
                yield
        finally:
            self._batching = False

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if not self._batching:
            with self._transaction():
                yield self._db
            return
        # Inside a batch: a savepoint, so one failed write is undone alone and its transition aborted.
        self._db.execute("SAVEPOINT step")
        try:
            yield self._db
        except sqlite3.Error as exc:
            self._db.execute("ROLLBACK TO step")
            raise JournalError(f"journal {self.path}: write failed: {exc}") from None
        except BaseException:
            self._db.execute("ROLLBACK TO step")
            raise
        finally:
            self._db.execute("RELEASE step")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT; any error rolls back, and SQLite's own errors become JournalError."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            yield
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise JournalError(f"journal {self.path}: write failed: {exc}") from None
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    # ----------------------------------------------------------------- writes
    def add_dispatch(
        self,
        dispatch_id: str,
        spec: JobSpec,
        ladder: Ladder,
        *,
        pinned: bool,
        intent: str,
        at: float,
        settings: dict[str, Any] | None = None,
    ) -> int:
        """Journal a new ladder dispatch (before anything is submitted for it), with what it needs to finish.

        A dispatch journaled without steps is submitted by whichever process drives the journal, on its next tick.
        Returns the row id (the order in which drivers adopt rows).
        """
        first = ladder.first
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO dispatches (id, created_at, intent, lane, pinned, spec, ladder, state, label, qos,"
                " job_id, final, outcome, updated_at, settings) VALUES (?,?,?,?,?,?,?,?,?,?,NULL,0,'',?,?)",
                (
                    dispatch_id,
                    at,
                    intent,
                    FELLOWS,
                    int(pinned),
                    json.dumps(attrs.asdict(spec)),
                    json.dumps([attrs.asdict(r) for r in ladder.rungs]),
                    first.state_name,
                    first.label,
                    first.qos,
                    at,
                    json.dumps(settings or {}),
                ),
            )
        return int(cursor.lastrowid or 0)

    def add_lane_dispatch(
        self,
        dispatch_id: str,
        spec: JobSpec,
        *,
        intent: str,
        lane: str,
        at: float,
        settings: dict[str, Any] | None = None,
    ) -> int:
        """Journal a dispatch pinned straight to a command lane (before its command runs); returns its row id."""
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO dispatches (id, created_at, intent, lane, pinned, spec, ladder, state, label, qos,"
                " job_id, final, outcome, updated_at, settings) VALUES (?,?,?,?,1,?,'[]',?,?,NULL,NULL,0,'',?,?)",
                (
                    dispatch_id,
                    at,
                    intent,
                    lane,
                    json.dumps(attrs.asdict(spec)),
                    HANDING_OFF,
                    HANDING_OFF,
                    at,
                    json.dumps(settings or {}),
                ),
            )
        return int(cursor.lastrowid or 0)

    def write(self, effects: Sequence[Record | Attach]) -> None:
        """Commit one decision's journal effects together (steps, then job ids), before anything they announce.

        Every step is its own transitions row; the dispatch row is updated once, to where the last effect leaves it.
        """
        row: dict[str, dict[str, Any]] = {}
        with self._write() as db:
            for effect in effects:
                if isinstance(effect, Record):
                    step = effect.step
                    db.execute(
                        "INSERT INTO transitions (dispatch_id, at, source, dest, trigger, rung_index, qos, job_id,"
                        " reason, note) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (
                            effect.dispatch_id,
                            step.at,
                            step.source,
                            step.dest,
                            step.trigger,
                            step.rung_index,
                            step.qos,
                            step.job_id,
                            step.reason,
                            step.note,
                        ),
                    )
                    row.setdefault(effect.dispatch_id, {}).update(
                        state=step.dest,
                        label=effect.label,
                        qos=step.qos,
                        job_id=step.job_id,
                        final=int(effect.final),
                        outcome=effect.outcome,
                        updated_at=step.at,
                    )
                else:
                    db.execute(
                        "INSERT OR REPLACE INTO jobs (dispatch_id, rung_index, job_id, at) VALUES (?,?,?,?)",
                        (effect.dispatch_id, effect.rung_index, effect.job_id, effect.at),
                    )
                    row.setdefault(effect.dispatch_id, {}).update(job_id=effect.job_id, updated_at=effect.at)
            for dispatch_id, values in row.items():
                columns = ", ".join(f"{name}=?" for name in values)
                db.execute(f"UPDATE dispatches SET {columns} WHERE id=?", (*values.values(), dispatch_id))  # noqa: S608 - column names are ours

    def record(self, effect: Record) -> None:
        """Commit one step (and the dispatch's new state)."""
        self.write((effect,))

    def attach(self, effect: Attach) -> None:
        """Commit the job id a rung's submit returned (or a move kept)."""
        self.write((effect,))

    def finish(self, dispatch_id: str, *, state: str, label: str, outcome: str, at: float) -> None:
        """Mark a dispatch final with an outcome (handed off, rejected, withdrawn)."""
        with self._write() as db:
            db.execute(
                "UPDATE dispatches SET state=?, label=?, final=1, outcome=?, updated_at=? WHERE id=?",
                (state, label, outcome, at, dispatch_id),
            )

    def start_handoff(self, dispatch_id: str, lane: str, argv: Sequence[str], at: float) -> None:
        """Commit that a handoff command is about to run (before it runs)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO handoffs (dispatch_id, lane, argv, started_at, status) VALUES (?,?,?,?,'started')",
                (dispatch_id, lane, json.dumps(list(argv)), at),
            )

    def set_handoff_pid(self, dispatch_id: str, pid: int) -> None:
        """Commit the process group of a handoff command that just started (to adopt it after a crash)."""
        with self._write() as db:
            db.execute("UPDATE handoffs SET pid=? WHERE dispatch_id=?", (pid, dispatch_id))

    def finish_handoff(
        self, dispatch_id: str, *, exit_status: int, stdout: str, stderr: str, at: float, ok: bool
    ) -> None:
        """Commit a handoff command's result."""
        with self._write() as db:
            db.execute(
                "UPDATE handoffs SET finished_at=?, exit_status=?, stdout=?, stderr=?, status=? WHERE dispatch_id=?",
                (at, exit_status, stdout, stderr, "done" if ok else "failed", dispatch_id),
            )
            # A dispatch pinned straight to a lane has no ladder, so no Dispatch to take the step: its row is set
            # here. A ladder dispatch takes its handed_off / handoff_failed step (a row of the table) instead.
            state = HANDED_OFF if ok else HANDOFF_FAILED
            db.execute(
                "UPDATE dispatches SET state=?, label=?, final=1, outcome=?, updated_at=? WHERE id=? AND lane!=?",
                (state, state, OUTCOME_HANDED_OFF if ok else OUTCOME_HANDOFF_FAILED, at, dispatch_id, FELLOWS),
            )

    # ----------------------------------------------------------------- reads
    # ----------------------------------------------------------------- requests and the driver's settings
    def put_meta(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON) under ``key`` in the journal's meta table (a request, the driver's settings)."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str) -> Any:
        """The JSON value stored under ``key``, or None."""
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return json.loads(rows[0]["value"]) if rows else None

    def meta_with_prefix(self, prefix: str) -> dict[str, Any]:
        """Every meta entry whose key starts with ``prefix``, by the rest of its key."""
        rows = self._read("SELECT key, value FROM meta WHERE key >= ? AND key < ?", (prefix, prefix + "\U0010ffff"))
        return {row["key"][len(prefix) :]: json.loads(row["value"]) for row in rows}

    def drop_meta(self, key: str) -> None:
        """Remove ``key`` from the meta table (nothing happens if it is not there)."""
        with self._write() as db:
            db.execute("DELETE FROM meta WHERE key=?", (key,))

    def _read(self, query: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        """Run one read; a damaged page is a JournalError saying what to do, never a raw sqlite3 traceback."""
        for attempt in range(50):
            try:
                return self._db.execute(query, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                # Busy is not damage: a WAL reader can be told so at once while another process sets the file up.
                if "locked" not in str(exc) or attempt == 49:
                    raise _damaged(self.path, exc) from None
                time.sleep(0.1)
            except sqlite3.DatabaseError as exc:
                raise _damaged(self.path, exc) from None
        raise AssertionError("unreachable")

    def dispatches(self, *, live_only: bool = False) -> list[DispatchRow]:
        """Every dispatch, oldest first (only those not final with ``live_only``)."""
        query = "SELECT * FROM dispatches"
        if live_only:
            query += " WHERE final=0"
        return [_dispatch_row(r) for r in self._read(query + " ORDER BY created_at, id")]

    def listings(self, *, live_only: bool = False) -> list[Listing]:
        """Every dispatch as ``status`` lists it, oldest first, in one query (a handoff's lane joined in).

        SQLite picks the name out of the spec, so no row's JSON is parsed here: 10,000 rows read in a few ms.
        """
        query = (
            "SELECT d.id, coalesce(json_extract(d.spec, '$.name'), ''), d.label, d.final, d.outcome, d.qos, d.job_id,"
            " coalesce(h.lane, d.lane), d.updated_at FROM dispatches d LEFT JOIN handoffs h ON h.dispatch_id = d.id"
        )
        if live_only:
            query += " WHERE d.final=0"
        rows = self._read(query + " ORDER BY d.created_at, d.id")
        return [Listing(r[0], str(r[1]), r[2], bool(r[3]), r[4], r[5], r[6], r[7], r[8]) for r in rows]

    def live_after(self, rowid: int, *, known: Container[str] = ()) -> tuple[int, list[DispatchRow]]:
        """The live dispatches journaled after row ``rowid`` (by any process) and not in ``known``, and the
        journal's last row id.

        A driver calls this every tick to adopt dispatches that another process enqueued; it reads only the new
        rows (a range on SQLite's rowid), and parses only those it does not already drive.
        """
        last = int(self._read("SELECT max(rowid) FROM dispatches")[0][0] or rowid)
        span = (rowid, last)
        ids = self._read("SELECT id FROM dispatches WHERE rowid > ? AND rowid <= ? AND final=0 ORDER BY rowid", span)
        wanted = [r[0] for r in ids if r[0] not in known]
        if len(wanted) > 100:  # a restart: one scan beats a lookup per row
            rows = self._read(
                "SELECT * FROM dispatches WHERE rowid > ? AND rowid <= ? AND final=0 ORDER BY rowid", span
            )
            return last, [_dispatch_row(r) for r in rows if r["id"] not in known]
        return last, [row for dispatch_id in wanted if (row := self.dispatch(dispatch_id)) is not None]

    def ended_since(self, outcome: str, since: float) -> list[DispatchRow]:
        """The dispatches that ended with ``outcome`` at or after ``since`` (reads only those rows)."""
        rows = self._read(
            "SELECT * FROM dispatches WHERE final=1 AND outcome=? AND updated_at>=? ORDER BY updated_at",
            (outcome, since),
        )
        return [_dispatch_row(r) for r in rows]

    def recent(self, limit: int) -> list[DispatchRow]:
        """The ``limit`` most recently created dispatches, oldest first (reads only those rows)."""
        rows = self._read("SELECT * FROM dispatches ORDER BY created_at DESC, id DESC LIMIT ?", (limit,))
        return [_dispatch_row(r) for r in rows][::-1]

    def count(self) -> int:
        """How many dispatches the journal holds."""
        return int(self._read("SELECT COUNT(*) FROM dispatches")[0][0])

    def with_prefix(self, prefix: str, limit: int = 10) -> list[DispatchRow]:
        """Up to ``limit`` dispatches whose id starts with ``prefix`` (letters and digits only are matched)."""
        if not prefix.isalnum():
            return []
        rows = self._read(
            "SELECT * FROM dispatches WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (prefix, prefix + "\uffff", limit)
        )
        return [_dispatch_row(r) for r in rows]

    def dispatch(self, dispatch_id: str) -> DispatchRow | None:
        """One dispatch, or None."""
        rows = self._read("SELECT * FROM dispatches WHERE id=?", (dispatch_id,))
        return _dispatch_row(rows[0]) if rows else None

    def steps(self, dispatch_id: str) -> list[Step]:
        """A dispatch's transitions, in the order they were journaled."""
        rows = self._read(
            "SELECT at, source, dest, trigger, rung_index, qos, job_id, reason, note FROM transitions "
            "WHERE dispatch_id=? ORDER BY seq",
            (dispatch_id,),
        )
        return [Step(**dict(r)) for r in rows]

    def jobs(self, dispatch_id: str) -> list[JobRow]:
        """The SLURM jobs a dispatch's rungs got, by rung."""
        rows = self._read(
            "SELECT dispatch_id, rung_index, job_id, at FROM jobs WHERE dispatch_id=? ORDER BY rung_index",
            (dispatch_id,),
        )
        return [JobRow(**dict(r)) for r in rows]

    def handoff(self, dispatch_id: str) -> HandoffRow | None:
        """A dispatch's handoff, or None."""
        rows = self._read("SELECT * FROM handoffs WHERE dispatch_id=?", (dispatch_id,))
        if not rows:
            return None
        values = dict(rows[0])
        values["argv"] = json.loads(values["argv"])
        return HandoffRow(**values)


def _wal_ok(path: Path, *, allow_network_fs: bool) -> bool:
    """True on a local disk; False on a network filesystem when allowed (a rollback journal instead), else raise."""
    try:
        refuse_network_fs(path.parent)
    except JournalError:
        if not allow_network_fs:
            raise
        return False
    return True


def _writable(path: Path) -> bool:
    """True if this user may write the journal and create its -wal and -shm files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection; ``immutable`` when SQLite cannot keep its -shm file beside the journal."""
    uri = path.resolve().as_uri()
    if _writable(path) or (path.with_name(path.name + "-shm").exists() and os.access(path.parent, os.R_OK)):
        return sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=10.0)
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, timeout=10.0)


def _damaged(path: Path, exc: Exception) -> JournalError:
    return JournalError(
        f"journal {path} is unreadable or damaged ({exc}); its live jobs are still on the cluster (their comments "
        "are fsm-<dispatch>-r<rung>, see `squeue --me -O JobID,Comment`): keep the file, and start a new one by "
        "pointing state_dir elsewhere"
    )


def lock_held(lock_path: Path) -> bool:
    """Does a process hold the driver lock at ``lock_path``? Probed with a non-blocking flock, released at once."""
    try:
        handle = open(lock_path, encoding="utf-8")  # noqa: SIM115 - closed below; read-only works on a read-only mount
    except OSError:
        return False  # no lock file: nobody ever drove this journal
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        handle.close()  # closing releases a lock the probe took
    return False


@attrs.frozen
class DriverOwner:
    """What the driver lock file says of the process that holds (or last held) the lock."""

    pid: int
    host: str
    since: float
    kind: str = "in-process"
    """``background`` (the driver process started on demand) or ``in-process`` (a program driving itself)."""
    log: str | None = None
    last_tick: float | None = None
    """When it last ticked: time after this, until the next driver ticks, was watched by no one."""

    def dump(self) -> str:
        return json.dumps(attrs.asdict(self))

    @classmethod
    def parse(cls, text: str) -> DriverOwner | None:
        """The record from a lock file's text (None if empty or unreadable; the old "pid N on host" form too)."""
        text = text.strip()
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                pid=int(data["pid"]),
                host=str(data["host"]),
                since=float(data["since"]),
                kind=str(data.get("kind", "in-process")),
                log=data.get("log"),
                last_tick=None if data.get("last_tick") is None else float(data["last_tick"]),
            )
        except (ValueError, KeyError, TypeError):
            words = text.split()
            if len(words) == 4 and words[0] == "pid" and words[1].isdigit():
                return cls(pid=int(words[1]), host=words[3], since=0.0)
            return None

    def describe(self) -> str:
        """``pid 42 on node1`` (what people and older messages read)."""
        return f"pid {self.pid} on {self.host}"
