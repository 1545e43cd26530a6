"""The write-ahead journal: SQLite in WAL mode, one row per dispatch, per transition, per job, per handoff.

Every row is committed before the side effect it announces, so a router killed at any point can finish
or undo the step when it restarts. Many processes may read the journal; one router drives it at a time
(an flock on ``<journal>.lock``, released by the kernel if the holder dies). It never talks to SLURM.

This module holds the rows: what is written (dispatches, steps, jobs, handoffs, requests) and the queries that
read them back. A state (a dispatch's, or its lane command's) is written only by ``write``, as a journaled step of
a row of the table (core/lifecycle.py); a new dispatch's row is inserted before its first step. Opening the file,
its transactions and its retrying reads are journal/file.py; the driver lock and its owner record journal/lock.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Container, Sequence
from typing import Any

import attrs

from fellows_fsm.core.budget import EndedSum, Windows
from fellows_fsm.core.effects import Attach, Command, Record, Step
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.paid import LIVE_PAID, PaidMark, PaidRun
from fellows_fsm.core.vocab import LADDER_LANE, HandoffStatus, PaidStatus
from fellows_fsm.errors import JournalError
from fellows_fsm.journal.lock import DriverLock
from fellows_fsm.journal.outbox import OutboxRows, write_events
from fellows_fsm.journal.schema import DispatchRow, HandoffRow, JobRow, Listing
from fellows_fsm.journal.schema import dispatch_row as _dispatch_row
from fellows_fsm.journal.scripts import drop_script
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["Journal"]


class Journal(OutboxRows, DriverLock):
    """The SQLite journal at ``path``; also the lifecycle's Recorder for the dispatches it drives."""

    def check_intact(self) -> None:
        """Raise JournalError if the journal file was deleted or replaced since it was opened.

        SQLite would go on writing into the unlinked file, and every later reader would see nothing.
        """
        if self._replaced():
            live = [f"{r.id} (SLURM job {r.job_id or '-'})" for r in self.dispatches(live_only=True)]
            jobs = "; its live dispatches were " + ", ".join(live) if live else ""
            raise JournalError(
                f"journal {self.path} was deleted or replaced while this router drove it; stopped without touching "
                f"the cluster{jobs}: restore the file, or cancel those jobs with scancel"
            )

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock and close the database."""
        self.release_driver()
        with self._conn_lock:
            self._db.close()

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
                    LADDER_LANE,
                    int(pinned),
                    json.dumps(attrs.asdict(spec)),
                    json.dumps([_rung_json(r) for r in ladder.rungs]),
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
        """Journal a dispatch pinned straight to a command lane, with its first step (``pin``: HANDING_OFF), before
        its command runs; returns its row id."""
        first = LaneDispatch(dispatch_id, lane).pin(at)
        with self.batch():  # the row and its first step together
            with self._write() as db:
                cursor = db.execute(
                    "INSERT INTO dispatches (id, created_at, intent, lane, pinned, spec, ladder, state, label, qos,"
                    " job_id, final, outcome, updated_at, settings) VALUES (?,?,?,?,1,?,'[]','','',NULL,NULL,0,'',?,?)",
                    (dispatch_id, at, intent, lane, json.dumps(attrs.asdict(spec)), at, json.dumps(settings or {})),
                )
            self.write([e for e in first.effects if isinstance(e, Record)])
        return int(cursor.lastrowid or 0)

    def write(self, effects: Sequence[Record | Attach]) -> None:
        """Commit one decision's journal effects together (steps, then job ids), before anything they announce.

        Every step is its own transitions row; the dispatch row is updated once, to where the last effect leaves it.
        A lane command's step writes the command's handoffs row with it (its argv when it starts, how it ended), and
        each step the events it is told as (journal/outbox.py: ``write_events``): no event without its step.
        """
        row: dict[str, dict[str, Any]] = {}
        with self._write() as db:
            for effect in effects:
                if isinstance(effect, Record):
                    step = effect.step
                    cursor = db.execute(
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
                    if effect.command is not None:
                        _write_command(db, effect.dispatch_id, step.at, effect.command)
                    if effect.paid is not None:
                        _write_paid(db, effect.dispatch_id, step.at, effect.paid)
                    write_events(db, effect, int(cursor.lastrowid or 0))  # the outbox: told in the same transaction
                    row.setdefault(effect.dispatch_id, {}).update(
                        state=step.dest,
                        label=effect.label,
                        qos=step.qos or None,  # a lane-pinned dispatch has no QoS
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
        for dispatch_id, values in row.items():
            if values.get("final"):  # committed final: nothing submits its script again
                self.after_commit(functools.partial(drop_script, self.path.parent, dispatch_id))

    def record(self, effect: Record) -> None:
        """Commit one step (and the dispatch's new state)."""
        self.write((effect,))

    def attach(self, effect: Attach) -> None:
        """Commit the job id a rung's submit returned (or a move kept)."""
        self.write((effect,))

    def set_handoff_pid(self, dispatch_id: str, pid: int) -> None:
        """Commit the process group of a handoff command that just started (to adopt it after a crash)."""
        with self._write() as db:
            db.execute("UPDATE handoffs SET pid=? WHERE dispatch_id=?", (pid, dispatch_id))

    def set_paid(self, dispatch_id: str, at: float, mark: PaidMark) -> None:
        """Commit what became of a paid run with no step of its dispatch (its delete was taken after a withdrawal
        or a stuck queue: cancelled)."""
        with self._write() as db:
            _write_paid(db, dispatch_id, at, mark)

    def paid_runs(self, *, since: float | None = None, status: Sequence[str] = ()) -> list[PaidRun]:
        """The paid runs handed off at or after ``since`` (all: None), or only those in ``status``."""
        sql, args = "SELECT * FROM paid_runs", list[Any]()
        where = []
        if since is not None:
            where.append("handed_at >= ?")
            args.append(since)
        if status:
            where.append(f"status IN ({','.join('?' * len(status))})")
            args.extend(status)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [PaidRun(**dict(r)) for r in self._read(sql + " ORDER BY handed_at", tuple(args))]

    def paid_sums(self, windows: Windows, now: float) -> list[EndedSum]:
        """The ended paid runs handed since the earliest of ``windows``, summed per bucket of windows and lane in
        ONE query (however many runs; the live ones are read as runs: ``paid_runs(status=LIVE_PAID)``). A run's
        GPU-hours are counted as core/paid.py: ``PaidRun.gpu_hours`` counts them: its GPUs times the lane's own run
        time if it reported one, else the time from the first look that saw it running to its end."""
        live = sorted(LIVE_PAID)
        rows = self._read(_PAID_SUMS, (windows.day, windows.week, windows.month, now, windows.earliest, *live))
        return [
            EndedSum(r["bucket"], r["lane"], r["runs"], r["gpu_hours"], r["priced"], r["cost"], r["unpriced"])
            for r in rows
        ]

    def paid_run(self, dispatch_id: str) -> PaidRun | None:
        """A dispatch's paid run, or None."""
        rows = self._read("SELECT * FROM paid_runs WHERE dispatch_id=?", (dispatch_id,))
        return PaidRun(**dict(rows[0])) if rows else None

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

    def dispatches(self, *, live_only: bool = False) -> list[DispatchRow]:
        """Every dispatch, oldest first (only those not final with ``live_only``)."""
        query = "SELECT * FROM dispatches"
        if live_only:
            query += " WHERE final=0"
        return [_dispatch_row(r) for r in self._read(query + " ORDER BY created_at, id")]

    def final_since(self, at: float) -> list[DispatchRow]:
        """The dispatches that became final at or after ``at``, oldest first (a follower that started then, before
        any of them ended, reports them too)."""
        query = "SELECT * FROM dispatches WHERE final=1 AND updated_at >= ? ORDER BY created_at, id"
        return [_dispatch_row(r) for r in self._read(query, (at,))]

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


def _write_command(db: Any, dispatch_id: str, at: float, command: Command) -> None:
    """A lane command's step, in its handoffs row: started (again) with its argv, or how it ended."""
    if command.status == HandoffStatus.STARTED:  # (a re-run starts afresh: no pid, nothing finished)
        db.execute(
            "INSERT OR REPLACE INTO handoffs (dispatch_id, lane, argv, started_at, status) VALUES (?,?,?,?,?)",
            (dispatch_id, command.lane, json.dumps(list(command.argv)), at, command.status),
        )
    else:
        db.execute(
            "UPDATE handoffs SET finished_at=?, exit_status=?, stdout=?, stderr=?, status=? WHERE dispatch_id=?",
            (at, command.exit_status, command.stdout, command.stderr, command.status, dispatch_id),
        )


_ENDS = frozenset({PaidStatus.SUCCEEDED, PaidStatus.FAILED, PaidStatus.CANCELLED})
_LIVE_MARKS = ",".join("?" * len(LIVE_PAID))
_PAID_SUMS = (
    "SELECT CASE WHEN handed_at >= ? THEN 'today' WHEN handed_at >= ? THEN"  # noqa: S608 - only the live statuses' placeholders are joined in
    " (CASE WHEN handed_at >= ? THEN 'both' ELSE 'week_only' END) ELSE 'month_only' END AS bucket,"
    " lane, COUNT(*) AS runs, TOTAL(h) AS gpu_hours, COUNT(price) AS priced, TOTAL(price * h) AS cost,"
    " TOTAL(CASE WHEN price IS NULL THEN h ELSE 0 END) AS unpriced"
    " FROM (SELECT handed_at, lane, price_per_gpu_hour AS price, gpus * (CASE"
    " WHEN run_seconds IS NOT NULL THEN MAX(run_seconds, 0.0) WHEN running_at IS NULL THEN 0.0"
    " ELSE MAX(COALESCE(ended_at, ?) - running_at, 0.0) END) / 3600.0 AS h"
    " FROM paid_runs WHERE handed_at >= ? AND status NOT IN (" + _LIVE_MARKS + "))"
    " GROUP BY bucket, lane"
)
"""The ended paid runs summed per bucket of windows and lane (``Journal.paid_sums``): the same arithmetic as
core/paid.py ``PaidRun.gpu_hours`` and core/budget.py ``bucket_of`` (a test holds the two to each other)."""


def _write_paid(db: Any, dispatch_id: str, at: float, mark: PaidMark) -> None:
    """A paid run's step, in its paid_runs row: its handoff began (the row, with the run's GPUs, limit and price),
    the lane has it, it started running (when: the first poll that saw it), it ended; a run started again keeps
    when its handoff began."""
    if mark.status == PaidStatus.STARTING:
        db.execute(
            "INSERT INTO paid_runs (dispatch_id, lane, handed_at, gpus, limit_seconds, price_per_gpu_hour, status)"
            " VALUES (?,?,?,?,?,?,?) ON CONFLICT(dispatch_id) DO UPDATE SET status=excluded.status",
            (dispatch_id, mark.lane, at, mark.gpus, mark.limit_seconds, mark.price_per_gpu_hour, mark.status),
        )
        return
    running = at if mark.status == PaidStatus.RUNNING else None
    ended = at if mark.status in _ENDS else None
    db.execute(
        "UPDATE paid_runs SET status=?, running_at=COALESCE(running_at, ?), ended_at=COALESCE(ended_at, ?),"
        " run_seconds=COALESCE(?, run_seconds), note=CASE WHEN ?='' THEN note ELSE ? END WHERE dispatch_id=?",
        (mark.status, running, ended, mark.run_seconds, mark.note, mark.note, dispatch_id),
    )


def _rung_json(rung: Rung) -> dict[str, object]:
    """A rung as the journal keeps it: its lane and its own ``park_early`` only when it is not fellows' (a journal of
    one cluster reads as before, and every rung written before lanes is fellows')."""
    kept = attrs.asdict(rung)
    if rung.lane == LADDER_LANE:
        del kept["lane"]
    if rung.park_early is None:
        del kept["park_early"]
    return kept
