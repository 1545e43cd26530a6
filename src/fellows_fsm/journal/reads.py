"""The journal's reads: a dispatch and its rows, the lists the views show, the paid runs the budget counts, with the
archive of finished dispatches beside the journal read as part of it where a reader needs the past.

The archive (archive.py: ``journal-archive.sqlite3``, the same tables) holds the dispatches that ended more than
``[journal] keep_days`` ago. It is attached to this connection (as ``archive``) the first time a reader needs it
and it exists; the live dispatches and what a driver reads are only in the journal (``final=0`` is never moved).
One rule makes a move that a crash cut in two read as one: a dispatch whose row is in the journal is read from the
journal only, and the archive's copy of it is ignored (a move copies to the archive, then deletes from the journal).
So a dispatch is never read twice, and no paid run counts twice in ``spend`` or the budget.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any

from fellows_fsm.core.budget import EndedSum, Windows
from fellows_fsm.core.effects import Step
from fellows_fsm.core.paid import LIVE_PAID, PaidRun
from fellows_fsm.journal.archive import MOVING, archive_path
from fellows_fsm.journal.ends import FREE_SUMS, JobEnded
from fellows_fsm.journal.file import JournalFile, damaged
from fellows_fsm.journal.schema import DispatchRow, HandoffRow, JobRow, Listing
from fellows_fsm.journal.schema import dispatch_row as _dispatch_row

__all__ = ["JournalReads"]

_MOVED = "NOT EXISTS (SELECT 1 FROM main.dispatches m WHERE m.id = a.{key})"
"""The archive's row ``a`` of a dispatch the journal no longer has (else the journal's row is the one read)."""


class JournalReads(JournalFile):
    """Every read of the journal (and of its archive, where a reader needs the finished past)."""

    _archive_attached = False

    def archived(self) -> bool:
        """Is the archive attached to this connection? It is attached the first time it exists when asked (never
        inside a transaction: a reader there reads the journal alone)."""
        if self._archive_attached:
            return True
        path = archive_path(self.path)
        if not path.exists():
            return False
        with self._conn_lock:
            if self._db.in_transaction:
                return False
            # Read-only, on every connection (each is a URI one: file.py): a writer's transactions never take the
            # archive's write lock, which only a move (archive.py) takes.
            shm = path.with_name(path.name + "-shm").exists()
            mode = "mode=ro" if _dir_writable(path) or shm else "immutable=1"
            target = f"{path.resolve().as_uri()}?{mode}"
            try:
                self._db.execute("ATTACH DATABASE ? AS archive", (target,))
            except sqlite3.DatabaseError as exc:
                raise damaged(path, exc) from None
            self._archive_attached = True
        return True

    def _both(self, main: str, archived: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        """Rows of ``main`` (a query of the journal), then those of ``archived`` (the same of the archive, with
        ``{moved}`` standing for the rule above) when the archive exists."""
        rows = self._read(main, params)
        if self.archived():
            rows += self._read(archived.format(moved=_MOVED.format(key="id")), params)
        return rows

    def _own(self, query: str, dispatch_id: str) -> list[sqlite3.Row]:
        """A dispatch's rows of one table (``query`` names ``{schema}``): the journal's, or, for a dispatch the
        journal no longer has, the archive's."""
        rows = self._read(query.format(schema="main"), (dispatch_id,))
        if rows or not self.archived():
            return rows
        if self._read("SELECT 1 FROM main.dispatches WHERE id=?", (dispatch_id,)):
            return rows
        return self._read(query.format(schema="archive"), (dispatch_id,))

    # ----------------------------------------------------------------- paid runs
    def paid_runs(self, *, since: float | None = None, status: Sequence[str] = ()) -> list[PaidRun]:
        """The paid runs handed off at or after ``since`` (all: None), or only those in ``status`` (archive too)."""
        where, args = ["1"], list[Any]()
        if since is not None:
            where.append("handed_at >= ?")
            args.append(since)
        if status:
            where.append(f"status IN ({','.join('?' * len(status))})")
            args.extend(status)
        cond = " AND ".join(where)
        rows = self._both(
            f"SELECT * FROM main.paid_runs WHERE {cond}",  # noqa: S608 - only placeholders are joined in
            f"SELECT * FROM archive.paid_runs a WHERE {cond} AND " + _MOVED.format(key="dispatch_id"),  # noqa: S608
            args,
        )
        return sorted((PaidRun(**dict(r)) for r in rows), key=lambda run: run.handed_at)

    def paid_sums(self, windows: Windows, now: float) -> list[EndedSum]:
        """The ended paid runs handed since the earliest of ``windows``, summed per bucket of windows and lane in
        ONE query (however many runs; the live ones are read as runs: ``paid_runs(status=LIVE_PAID)``), the
        archive's included. A run's GPU-hours are counted as core/paid.py: ``PaidRun.gpu_hours`` counts them: its
        GPUs times the lane's own run time if it reported one, else the time from the first look that saw it
        running to its end."""
        live = sorted(LIVE_PAID)
        source = "main.paid_runs"
        if self.archived():
            moved = _MOVED.format(key="dispatch_id")
            source = f"(SELECT * FROM main.paid_runs UNION ALL SELECT a.* FROM archive.paid_runs a WHERE {moved})"  # noqa: S608 - ours
        rows = self._read(
            _PAID_SUMS.format(source=source),
            (windows.day, windows.week, windows.month, now, windows.earliest, *live),
        )
        return [
            EndedSum(r["bucket"], r["lane"], r["runs"], r["gpu_hours"], r["priced"], r["cost"], r["unpriced"])
            for r in rows
        ]

    def paid_run(self, dispatch_id: str) -> PaidRun | None:
        """A dispatch's paid run, or None."""
        rows = self._own("SELECT * FROM {schema}.paid_runs WHERE dispatch_id=?", dispatch_id)
        return PaidRun(**dict(rows[0])) if rows else None

    # ----------------------------------------------------------------- free jobs' ends
    def ends(self, dispatch_ids: Sequence[str] | None = None) -> dict[str, JobEnded]:
        """How each of ``dispatch_ids``' free jobs ended (all: None), by dispatch id (one without an end: absent),
        the archive's included."""
        if dispatch_ids is not None and not dispatch_ids:
            return {}
        cond, args = "1", tuple(dispatch_ids or ())
        if dispatch_ids is not None:
            cond = f"dispatch_id IN ({','.join('?' * len(args))})"
        rows = self._both(
            f"SELECT * FROM main.ends WHERE {cond}",  # noqa: S608 - only placeholders are joined in
            f"SELECT * FROM archive.ends a WHERE {cond} AND " + _MOVED.format(key="dispatch_id"),  # noqa: S608
            args,
        )
        return {r["dispatch_id"]: JobEnded(**dict(r)) for r in rows}

    def ends_since(self, since: float, limit: int) -> list[JobEnded]:
        """The free jobs' ends journaled with an end at or after ``since``, oldest first, at most ``limit`` (the
        journal's only: what the shared ledger is told, driver/ledger.py; one at ``since`` again: kept once there)."""
        rows = self._read("SELECT * FROM main.ends WHERE ended_at >= ? ORDER BY ended_at LIMIT ?", (since, limit))
        return [JobEnded(**dict(r)) for r in rows]

    def free_sums(self, since: float) -> list[tuple[str, int, float]]:
        """(lane, jobs, GPU-hours) of the free jobs that ended since ``since``, per lane, in ONE query (the
        archive's included: a move never changes ``spend``)."""
        source = "main.ends"
        if self.archived():
            moved = _MOVED.format(key="dispatch_id")
            source = f"(SELECT * FROM main.ends UNION ALL SELECT a.* FROM archive.ends a WHERE {moved})"  # noqa: S608 - ours
        return [(r["lane"], r["runs"], r["gpu_hours"]) for r in self._read(FREE_SUMS.format(source=source), (since,))]

    # ----------------------------------------------------------------- requests and the driver's settings
    def get_meta(self, key: str) -> Any:
        """The JSON value stored under ``key``, or None."""
        rows = self._read("SELECT value FROM main.meta WHERE key=?", (key,))
        return json.loads(rows[0]["value"]) if rows else None

    def meta_with_prefix(self, prefix: str) -> dict[str, Any]:
        """Every meta entry whose key starts with ``prefix``, by the rest of its key."""
        rows = self._read(
            "SELECT key, value FROM main.meta WHERE key >= ? AND key < ?", (prefix, prefix + "\U0010ffff")
        )
        return {row["key"][len(prefix) :]: json.loads(row["value"]) for row in rows}

    # ----------------------------------------------------------------- dispatches
    def dispatches(self, *, live_only: bool = False) -> list[DispatchRow]:
        """Every dispatch, oldest first (the archive's too), or only those not final with ``live_only`` (the
        journal's partial index of them: the finished ones are not read)."""
        if live_only:
            rows = self._read("SELECT * FROM main.dispatches WHERE final=0 ORDER BY created_at, id")
            return [_dispatch_row(r) for r in rows]
        found = self._both("SELECT * FROM main.dispatches", "SELECT * FROM archive.dispatches a WHERE {moved}")
        return sorted((_dispatch_row(r) for r in found), key=lambda r: (r.created_at, r.id))

    def final_since(self, at: float) -> list[DispatchRow]:
        """The dispatches that became final at or after ``at``, oldest first (a follower that started then, before
        any of them ended, reports them too; ended within ``keep_days``, so in the journal)."""
        # ``+created_at``: the index of the ended ones picks them, not a scan of every row in created order.
        query = "SELECT * FROM main.dispatches WHERE final=1 AND updated_at >= ? ORDER BY +created_at, +id"
        return [_dispatch_row(r) for r in self._read(query, (at,))]

    def listings(self, *, live_only: bool = False) -> list[Listing]:
        """Every dispatch as ``status`` lists it, oldest first, in one query per file (a handoff's lane joined in).

        SQLite picks the name out of the spec, so no row's JSON is parsed here: 10,000 rows read in a few ms.
        """
        columns = (
            "SELECT a.id, coalesce(json_extract(a.spec, '$.name'), ''), a.label, a.final, a.outcome, a.qos,"
            " a.job_id, coalesce(h.lane, a.lane), a.updated_at, a.created_at FROM {schema}.dispatches a"
            " LEFT JOIN {schema}.handoffs h ON h.dispatch_id = a.id"
        )
        if live_only:
            rows = self._read(columns.format(schema="main") + " WHERE a.final=0")
        else:
            rows = self._both(columns.format(schema="main"), columns.format(schema="archive") + " WHERE {moved}")
        rows.sort(key=lambda r: (r[9], r[0]))
        return [Listing(r[0], str(r[1]), r[2], bool(r[3]), r[4], r[5], r[6], r[7], r[8]) for r in rows]

    def live_after(self, rowid: int, *, known: Container[str] = ()) -> tuple[int, list[DispatchRow]]:
        """The live dispatches journaled after row ``rowid`` (by any process) and not in ``known``, and the
        journal's last row id.

        A driver calls this every tick to adopt dispatches that another process enqueued; it reads only the new
        rows (a range on SQLite's rowid; from the start, the live ones' partial index), and parses only those it
        does not already drive.
        """
        last = int(self._read("SELECT max(rowid) FROM main.dispatches")[0][0] or rowid)
        span = (rowid, last)
        # From the start (a restart), the live ones' index, not the rowid range over every finished row.
        table = "main.dispatches INDEXED BY dispatches_live" if rowid <= 0 else "main.dispatches"
        ids = self._read(
            f"SELECT id FROM {table} WHERE rowid > ? AND rowid <= ? AND final=0 ORDER BY rowid",  # noqa: S608 - ours
            span,
        )
        wanted = [r[0] for r in ids if r[0] not in known]
        if len(wanted) > 100:  # a restart: one scan beats a lookup per row
            rows = self._read(
                f"SELECT * FROM {table} WHERE rowid > ? AND rowid <= ? AND final=0 ORDER BY rowid",  # noqa: S608
                span,
            )
            return last, [_dispatch_row(r) for r in rows if r["id"] not in known]
        return last, [row for dispatch_id in wanted if (row := self.dispatch(dispatch_id)) is not None]

    def ended_since(self, outcome: str, since: float) -> list[DispatchRow]:
        """The dispatches that ended with ``outcome`` at or after ``since`` (reads only those rows)."""
        rows = self._read(
            "SELECT * FROM main.dispatches WHERE final=1 AND outcome=? AND updated_at>=? ORDER BY updated_at",
            (outcome, since),
        )
        return [_dispatch_row(r) for r in rows]

    def recent(self, limit: int) -> list[DispatchRow]:
        """The ``limit`` most recently created dispatches, oldest first (reads only those rows, the archive's
        most recent too when it has any)."""
        newest = "SELECT * FROM {schema}.dispatches a {where} ORDER BY created_at DESC, id DESC LIMIT ?"
        rows = self._both(
            newest.format(schema="main", where=""),
            newest.format(schema="archive", where="WHERE {moved}"),
            (limit,),
        )
        chosen = sorted((_dispatch_row(r) for r in rows), key=lambda r: (r.created_at, r.id))
        return chosen[-limit:] if limit else []

    def count(self) -> int:
        """How many dispatches the journal and its archive hold."""
        total = int(self._read("SELECT COUNT(*) FROM main.dispatches")[0][0])
        if self.archived():
            rows = self._read("SELECT value FROM archive.meta WHERE key='dispatches'")
            kept = int(json.loads(rows[0][0])) if rows else 0
            total += kept - self.halfway()
        return total

    def halfway(self, *, exact: bool = False) -> int:
        """How many dispatches are in both files (a move a crash cut between its copy and its delete): those of the
        archive's ``moving`` list still in the journal (archive.py keeps it), or, ``exact``, every finished one of
        the journal looked up in the archive (``journal check``)."""
        if not self.archived():
            return 0
        if exact:
            both = "SELECT COUNT(*) FROM main.dispatches m WHERE final=1 AND EXISTS (SELECT 1 FROM archive.dispatches a"
            return int(self._read(both + " WHERE a.id = m.id)")[0][0])
        rows = self._read("SELECT value FROM archive.meta WHERE key=?", (MOVING,))
        ids = json.loads(rows[0][0]) if rows else []
        return sum(1 for i in ids if self._read("SELECT 1 FROM main.dispatches WHERE id=?", (i,)))

    def with_prefix(self, prefix: str, limit: int = 10) -> list[DispatchRow]:
        """Up to ``limit`` dispatches whose id starts with ``prefix`` (letters and digits only are matched)."""
        if not prefix.isalnum():
            return []
        query = "SELECT * FROM {schema}.dispatches a WHERE id >= ? AND id < ? {moved} ORDER BY id LIMIT ?"
        rows = self._both(
            query.format(schema="main", moved=""),
            query.format(schema="archive", moved="AND {moved}"),
            (prefix, prefix + "\uffff", limit),
        )
        return sorted((_dispatch_row(r) for r in rows), key=lambda r: r.id)[:limit]

    def dispatch(self, dispatch_id: str) -> DispatchRow | None:
        """One dispatch (from the journal, else from the archive), or None."""
        rows = self._read("SELECT * FROM main.dispatches WHERE id=?", (dispatch_id,))
        if not rows and self.archived():
            rows = self._read("SELECT * FROM archive.dispatches WHERE id=?", (dispatch_id,))
        return _dispatch_row(rows[0]) if rows else None

    def steps(self, dispatch_id: str) -> list[Step]:
        """A dispatch's transitions, in the order they were journaled."""
        rows = self._own(
            "SELECT at, source, dest, trigger, rung_index, qos, job_id, reason, note FROM {schema}.transitions "
            "WHERE dispatch_id=? ORDER BY seq",
            dispatch_id,
        )
        return [Step(**dict(r)) for r in rows]

    def jobs(self, dispatch_id: str) -> list[JobRow]:
        """The SLURM jobs a dispatch's rungs got, by rung."""
        rows = self._own(
            "SELECT dispatch_id, rung_index, job_id, at FROM {schema}.jobs WHERE dispatch_id=? ORDER BY rung_index",
            dispatch_id,
        )
        return [JobRow(**dict(r)) for r in rows]

    def handoff(self, dispatch_id: str) -> HandoffRow | None:
        """A dispatch's handoff, or None."""
        rows = self._own("SELECT * FROM {schema}.handoffs WHERE dispatch_id=?", dispatch_id)
        if not rows:
            return None
        values = dict(rows[0])
        values["argv"] = json.loads(values["argv"])
        return HandoffRow(**values)


def _dir_writable(path: Path) -> bool:
    return os.access(path.parent, os.W_OK | os.X_OK)


_LIVE_MARKS = ",".join("?" * len(LIVE_PAID))
_PAID_SUMS = (
    "SELECT CASE WHEN handed_at >= ? THEN 'today' WHEN handed_at >= ? THEN"  # noqa: S608 - only the live statuses' placeholders are joined in
    " (CASE WHEN handed_at >= ? THEN 'both' ELSE 'week_only' END) ELSE 'month_only' END AS bucket,"
    " lane, COUNT(*) AS runs, TOTAL(h) AS gpu_hours, COUNT(price) AS priced, TOTAL(price * h) AS cost,"
    " TOTAL(CASE WHEN price IS NULL THEN h ELSE 0 END) AS unpriced"
    " FROM (SELECT handed_at, lane, price_per_gpu_hour AS price, gpus * (CASE"
    " WHEN run_seconds IS NOT NULL THEN MAX(run_seconds, 0.0) WHEN running_at IS NULL THEN 0.0"
    " ELSE MAX(COALESCE(ended_at, ?) - running_at, 0.0) END) / 3600.0 AS h"
    " FROM {source} WHERE handed_at >= ? AND status NOT IN (" + _LIVE_MARKS + "))"
    " GROUP BY bucket, lane"
)
"""The ended paid runs summed per bucket of windows and lane (``JournalReads.paid_sums``; ``{source}``: the
journal's paid_runs, or them and the archive's): the same arithmetic as core/paid.py ``PaidRun.gpu_hours`` and
core/budget.py ``bucket_of`` (a test holds the two to each other)."""
