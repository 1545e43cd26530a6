"""The archive beside the journal: the dispatches that ended more than ``[journal] keep_days`` ago, moved out of the
journal so it holds what is live and recent, and read back by ``history``, ``status --all``, ``spend`` and the budget
(reads.py).

A move is a copy, then a delete, keyed by dispatch id, never one transaction across the two files (SQLite commits
an attached WAL file on its own, so a crash could keep one file's half and lose the other's):
1. one transaction of the archive (its commit synced to disk: ``synchronous=FULL``) replaces the archive's rows of
   a batch of dispatches by the journal's;
2. one transaction of the journal deletes those the archive now holds as the journal does (still final, the same
   last update, as many steps, the same paid run status).
A crash between the two leaves a dispatch in both files: every reader reads the journal's row and ignores the
archive's (reads.py), so nothing is lost and nothing counted twice, and the next move copies it again and deletes
it. One move runs at a time (an flock beside the journal); it needs no driver lock, so it runs beside a driver,
and its transactions are short (a batch), so a driver's writes wait for one batch at most.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from fellows_fsm.core.paid import LIVE_PAID
from fellows_fsm.core.vocab import Outcome
from fellows_fsm.errors import JournalError
from fellows_fsm.journal.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from fellows_fsm.journal.statefs import check_room, refuse_network_fs

__all__ = ["BATCH", "MOVING", "SETTLE_SECONDS", "Compacted", "archive_path", "compact"]

BATCH = 2000
"""Dispatches moved per pair of transactions (a driver's write waits for one batch at most)."""
SETTLE_SECONDS = 3600.0
"""A dispatch whose submit was interrupted is looked up by the driver for an hour after its end
(driver/withdrawal.py: ``sweep_interrupted``): it is never moved before."""
MOVING = "moving"
"""The archive's meta key of the ids copied and maybe not yet deleted from the journal (set with each copy, cut to
those still in the journal after each delete): a reader counts the dispatches in both files from it alone."""
_CHILDREN = ("transitions", "jobs", "handoffs", "paid_runs", "ends")
"""A dispatch's rows besides its own, each keyed by ``dispatch_id``."""


def archive_path(journal: Path) -> Path:
    """``journal-archive.sqlite3`` beside ``journal.sqlite3``."""
    return journal.with_name(journal.stem + "-archive" + journal.suffix)


@attrs.frozen
class Compacted:
    """What a compaction did."""

    moved: int
    """Dispatches moved to the archive."""
    left: int
    """Dispatches still due when it stopped (it moves ``max_batches`` batches at most), 0 when all were moved."""
    archive: Path
    seconds: float


_DUE_WHERE = (
    " FROM main.dispatches d WHERE final=1 AND updated_at < ?"  # noqa: S608 - only placeholders are joined in
    " AND NOT (outcome = ? AND updated_at >= ?)"
    " AND NOT EXISTS (SELECT 1 FROM main.paid_runs p WHERE p.dispatch_id = d.id AND p.status IN ("
    + ",".join("?" * len(LIVE_PAID))
    + "))"
)
_DUE = "SELECT id" + _DUE_WHERE + " ORDER BY updated_at LIMIT ?"
"""The dispatches due to move: final, last updated before the cut, no paid run that may still spend or wait for its
delete (``LIVE_PAID``: they stay, and are read where the budget reads live runs), no interrupted submit still
looked up."""
_SAME = (
    "INSERT INTO temp.verified SELECT m.id FROM temp.moving t CROSS JOIN main.dispatches m ON m.id = t.id"
    " CROSS JOIN archive.dispatches a ON a.id = m.id WHERE +m.final = 1 AND m.updated_at = a.updated_at"
    " AND (SELECT count(*) FROM main.transitions WHERE dispatch_id = m.id)"
    " = (SELECT count(*) FROM archive.transitions WHERE dispatch_id = m.id)"
    " AND coalesce((SELECT status FROM main.paid_runs WHERE dispatch_id = m.id), '')"
    " = coalesce((SELECT status FROM archive.paid_runs WHERE dispatch_id = m.id), '')"
)
"""The batch's dispatches the archive holds as the journal does (what step 2 deletes). CROSS JOIN: SQLite loops over
the batch first (never over the index of every ended dispatch)."""


def compact(
    journal: Path,
    *,
    before: float,
    now: float | None = None,
    batch: int = BATCH,
    max_batches: int | None = None,
    wait: bool = True,
    between: Callable[[list[str]], None] | None = None,
) -> Compacted | None:
    """Move every dispatch of ``journal`` due to move (ended before ``before``) to its archive, ``batch`` at a
    time (at most ``max_batches`` batches). None, touching nothing, when another move runs and ``wait`` is False.
    ``between`` is called between a batch's copy and its delete (tests stop the process there)."""
    started = time.perf_counter()
    at = time.time() if now is None else now
    check_room(journal.parent)  # a move on a full disk would only fail half way
    with _move_lock(journal, wait=wait) as held:
        if not held:
            return None
        target = archive_path(journal)
        db = sqlite3.connect(journal, isolation_level=None, timeout=30.0)
        try:
            moved, batches = 0, 0
            args = (before, str(Outcome.WITHDRAWN_INTERRUPTED), at - SETTLE_SECONDS, *sorted(LIVE_PAID))
            if not db.execute(_DUE, (*args, 1)).fetchall():  # nothing due: no archive made for nothing
                return Compacted(moved=0, left=0, archive=target, seconds=time.perf_counter() - started)
            if not target.exists():
                _create(target)
            _attach(db, target)
            while max_batches is None or batches < max_batches:
                ids = [r[0] for r in db.execute(_DUE, (*args, batch))]
                if not ids:
                    break
                moved += _move(db, ids, between)
                batches += 1
            left = int(db.execute("SELECT count(*)" + _DUE_WHERE, args).fetchone()[0])
            return Compacted(moved=moved, left=left, archive=target, seconds=time.perf_counter() - started)
        except sqlite3.Error as exc:
            raise JournalError(f"journal {journal}: moving finished dispatches to {target} failed: {exc}") from None
        finally:
            db.close()


def _move(db: sqlite3.Connection, ids: list[str], between: Callable[[list[str]], None] | None) -> int:
    """Copy the dispatches ``ids`` to the archive (one synced transaction of it), then delete from the journal
    those the archive holds as the journal does (one transaction of the journal); return how many moved."""
    db.execute("DELETE FROM temp.moving")
    db.executemany("INSERT INTO temp.moving (id) VALUES (?)", [(i,) for i in ids])
    moving = "(SELECT id FROM temp.moving)"
    db.execute("BEGIN")
    try:
        had = db.execute(f"SELECT count(*) FROM archive.dispatches WHERE id IN {moving}").fetchone()[0]  # noqa: S608
        for table in (*_CHILDREN, "dispatches"):
            key = "id" if table == "dispatches" else "dispatch_id"
            db.execute(f"DELETE FROM archive.{table} WHERE {key} IN {moving}")  # noqa: S608 - our own names
        for table in ("dispatches", *_CHILDREN):
            key = "id" if table == "dispatches" else "dispatch_id"
            columns = ", ".join(_columns(db, table))
            db.execute(
                f"INSERT INTO archive.{table} ({columns}) SELECT {columns} FROM main.{table} WHERE {key} IN {moving}"  # noqa: S608
            )
        count = db.execute("SELECT value FROM archive.meta WHERE key='dispatches'").fetchone()
        kept = int(count[0]) if count else 0
        db.execute(
            "INSERT OR REPLACE INTO archive.meta (key, value) VALUES ('dispatches', ?)", (str(kept + len(ids) - had),)
        )
        _set_moving(db, sorted({*_moving(db), *ids}))  # in both files until the journal's delete
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    if between is not None:
        between(ids)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DELETE FROM temp.verified")
        db.execute(_SAME)
        verified = "(SELECT id FROM temp.verified)"
        for table in _CHILDREN:
            db.execute(f"DELETE FROM main.{table} WHERE dispatch_id IN {verified}")  # noqa: S608 - our own names
        deleted = db.execute(f"DELETE FROM main.dispatches WHERE id IN {verified}").rowcount  # noqa: S608
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("BEGIN")
    try:  # what is still in both files: a batch whose delete did not come (a crash, or changed since its copy)
        still = [i for i in _moving(db) if db.execute("SELECT 1 FROM main.dispatches WHERE id=?", (i,)).fetchone()]
        _set_moving(db, still)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return int(deleted)


def _moving(db: sqlite3.Connection) -> list[str]:
    """The ids the archive's meta says may be in both files (reads.py: ``JournalReads.halfway`` counts those)."""
    row = db.execute("SELECT value FROM archive.meta WHERE key=?", (MOVING,)).fetchone()
    return list(json.loads(row[0])) if row else []


def _set_moving(db: sqlite3.Connection, ids: list[str]) -> None:
    db.execute("INSERT OR REPLACE INTO archive.meta (key, value) VALUES (?, ?)", (MOVING, json.dumps(ids)))


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    """The journal's columns of ``table`` (both files have them: the archive is made and upgraded from the same
    schema), by name, so a column added by a migration lands in its place."""
    return [r[1] for r in db.execute(f"PRAGMA main.table_info({table})")]


def _attach(db: sqlite3.Connection, target: Path) -> None:
    """Attach the archive (upgraded to this schema first, on a connection of its own) for the move."""
    _upgrade(target)
    db.execute("PRAGMA busy_timeout=30000")
    db.execute("ATTACH DATABASE ? AS archive", (str(target),))
    db.execute("PRAGMA archive.synchronous=FULL")  # a copy is on disk before the journal's delete begins
    db.execute("CREATE TEMP TABLE IF NOT EXISTS moving (id TEXT PRIMARY KEY)")
    db.execute("CREATE TEMP TABLE IF NOT EXISTS verified (id TEXT PRIMARY KEY)")


def _upgrade(target: Path) -> None:
    db = sqlite3.connect(target, isolation_level=None, timeout=30.0)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (SCHEMA_VERSION, *MIGRATIONS):
            raise JournalError(
                f"archive {target} has schema version {version}, this fellows-fsm reads {SCHEMA_VERSION}; use the "
                "fellows-fsm that wrote it"
            )
        for old in range(version, SCHEMA_VERSION):
            db.executescript(f"BEGIN; {MIGRATIONS[old]} PRAGMA user_version={old + 1}; COMMIT;")
    finally:
        db.close()


def _create(target: Path) -> None:
    """Make the archive whole under another name, then rename it into place: a reader that sees the file sees its
    tables."""
    fresh = target.with_name(target.name + ".new")
    for stale in (fresh, fresh.with_name(fresh.name + "-wal"), fresh.with_name(fresh.name + "-shm")):
        stale.unlink(missing_ok=True)
    db = sqlite3.connect(fresh, isolation_level=None)
    try:
        db.executescript(SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION};")
        db.execute(f"PRAGMA journal_mode={'WAL' if _local(target.parent) else 'DELETE'}")  # as the journal's
    finally:
        db.close()
    os.replace(fresh, target)


def _local(directory: Path) -> bool:
    try:
        refuse_network_fs(directory)
    except JournalError:
        return False  # allow_network_state_dir: SQLite's rollback journal, as the journal itself (file.py)
    return True


@contextlib.contextmanager
def _move_lock(journal: Path, *, wait: bool) -> Iterator[bool]:
    """One move at a time: True once this one holds the lock (waiting for it with ``wait``), else False."""
    with open(journal.with_name(journal.name + ".compact-lock"), "a", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
