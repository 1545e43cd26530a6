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
from collections.abc import Sequence
from typing import Any

import attrs

from fellows_fsm.core.effects import Attach, Command, Record
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.paid import PaidMark
from fellows_fsm.core.vocab import LADDER_LANE, HandoffStatus, PaidStatus
from fellows_fsm.errors import JournalError
from fellows_fsm.journal.check import mark_check_due
from fellows_fsm.journal.ends import write_end
from fellows_fsm.journal.lock import DriverLock
from fellows_fsm.journal.outbox import TOLD, OutboxRows, write_events
from fellows_fsm.journal.reads import JournalReads
from fellows_fsm.journal.scripts import drop_script
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["Journal"]


class Journal(OutboxRows, JournalReads, DriverLock):
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

    def acquire_driver(self, *, kind: str = "in-process", log: str | None = None, at: float | None = None) -> None:
        """Become the one router driving this journal (lock.py: ``DriverLock.acquire_driver``); after a driver that
        did not end cleanly (killed, or its machine went down), every page and row is read first (file.py:
        ``check_all``): a damaged journal is refused here, one line, the lock let go and the check left due."""
        if self.driving:
            return
        super().acquire_driver(kind=kind, log=log, at=at)
        if self.ended_uncleanly:
            try:
                self.check_all()
            except JournalError:
                mark_check_due(self.path)  # whoever opens it to write next reads every page again
                self._owner = None  # let go without saying it ended cleanly
                self.release_driver()
                raise

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
                    if effect.end is not None:
                        write_end(db, effect.dispatch_id, effect.end)
                    if effect.final or step.trigger in TOLD:  # (most steps are told as nothing: core/events.py)
                        write_events(db, effect, int(cursor.lastrowid or 0))  # the outbox: in the same transaction
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
                if values.get("final") == 0:
                    # A row that stays live is updated without naming ``final``: SQLite rewrites an index entry
                    # whenever a column of its key or of its WHERE is set, even to the value it had, so the live
                    # dispatches' index would be rewritten at every step. A row that was final is updated in full.
                    kept = {name: value for name, value in values.items() if name != "final"}
                    columns = ", ".join(f"{name}=?" for name in kept)
                    sql = f"UPDATE dispatches SET {columns} WHERE id=? AND final=0"  # noqa: S608 - column names are ours
                    if db.execute(sql, (*kept.values(), dispatch_id)).rowcount:
                        continue
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

    # ----------------------------------------------------------------- requests and the driver's settings
    def put_meta(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON) under ``key`` in the journal's meta table (a request, the driver's settings)."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def drop_meta(self, key: str) -> None:
        """Remove ``key`` from the meta table (nothing happens if it is not there)."""
        with self._write() as db:
            db.execute("DELETE FROM meta WHERE key=?", (key,))


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
