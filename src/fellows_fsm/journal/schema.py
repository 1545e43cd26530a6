"""The journal's schema (with its migrations) and the rows it reads back, as frozen values."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import attrs

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "DispatchRow", "HandoffRow", "JobRow", "Listing", "dispatch_row"]


SCHEMA_VERSION = 8
ENDS = """
CREATE TABLE IF NOT EXISTS ends (
    dispatch_id TEXT PRIMARY KEY REFERENCES dispatches(id),
    lane TEXT NOT NULL,
    job_id TEXT,
    result TEXT NOT NULL,
    exit_code INTEGER,
    slurm_state TEXT NOT NULL,
    started_at REAL,
    ended_at REAL NOT NULL,
    elapsed_seconds REAL,
    gpus INTEGER NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS ends_by_time ON ends(ended_at);
"""
PAID_RUNS = """
CREATE TABLE IF NOT EXISTS paid_runs (
    dispatch_id TEXT PRIMARY KEY REFERENCES dispatches(id),
    lane TEXT NOT NULL,
    handed_at REAL NOT NULL,
    gpus INTEGER NOT NULL,
    limit_seconds REAL,
    price_per_gpu_hour REAL,
    status TEXT NOT NULL,
    running_at REAL,
    ended_at REAL,
    run_seconds REAL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS paid_runs_by_time ON paid_runs(handed_at);
CREATE INDEX IF NOT EXISTS paid_runs_by_status ON paid_runs(status);
"""
DISPATCH_INDEXES = """
CREATE INDEX IF NOT EXISTS dispatches_live ON dispatches(created_at, id) WHERE final=0;
CREATE INDEX IF NOT EXISTS dispatches_by_time ON dispatches(created_at, id);
CREATE INDEX IF NOT EXISTS dispatches_ended ON dispatches(updated_at) WHERE final=1;
"""
"""What a command reads without reading the finished dispatches (issue 40): the live ones (``final=0``, a partial
index of only them), the most recent ones (``status``), and the ones ended since a time (a follower, the archive's
move of those ended before ``keep_days``)."""
OUTBOX = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    dispatch_id TEXT NOT NULL,
    event TEXT NOT NULL,
    at REAL NOT NULL,
    step_seq INTEGER,
    facts TEXT NOT NULL,
    body TEXT
);
CREATE TABLE IF NOT EXISTS deliveries (
    seq INTEGER NOT NULL,
    sink TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    first_at REAL,
    last_at REAL,
    next_at REAL,
    answer TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (seq, sink)
);
CREATE INDEX IF NOT EXISTS deliveries_by_status ON deliveries(status, sink);
"""
"""The notifications' outbox (issue 39): one row per event, written in the same transaction as the step it reports
(``step_seq``: its transitions row; ``body``: the exact bytes sent, fixed at the first send), and what became of it
at each sink. No foreign key to dispatches: an archived dispatch's rows may go while its events are still sent.
No index on ``event_id`` (schema 8): nothing looks an event up by it, and each is a fresh random id (uuid4); the
index cost every event row a B-tree insert and a page at a random place (a moving tick's 200 ``rung_changed``)."""
OUTBOX_8 = """
CREATE TABLE outbox_8 (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    dispatch_id TEXT NOT NULL,
    event TEXT NOT NULL,
    at REAL NOT NULL,
    step_seq INTEGER,
    facts TEXT NOT NULL,
    body TEXT
);
INSERT INTO outbox_8 (seq, event_id, dispatch_id, event, at, step_seq, facts, body)
    SELECT seq, event_id, dispatch_id, event, at, step_seq, facts, body FROM outbox ORDER BY seq;
DELETE FROM sqlite_sequence WHERE name = 'outbox_8';
INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_8', seq FROM sqlite_sequence WHERE name = 'outbox';
DROP TABLE outbox;
ALTER TABLE outbox_8 RENAME TO outbox;
"""
"""Schema 7 to 8: the outbox without its ``event_id`` UNIQUE index (SQLite drops a column's constraint only by
rebuilding its table), every row and its ``seq`` kept, and the table's AUTOINCREMENT counter carried over (a seq is
never given twice: a sink's start and a sender's place are seqs)."""
# Each step from version N to N + 1, applied in one transaction when an older journal is opened.
MIGRATIONS: dict[int, str] = {
    1: "ALTER TABLE handoffs ADD COLUMN pid INTEGER;"
    " ALTER TABLE dispatches ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';",
    # The handoff and a refused first submit became rows of the table: an ended dispatch's state says how it
    # ended (it was FAILED_TO_GCP, or its first rung, with only the outcome to tell).
    2: "UPDATE dispatches SET state='HANDED_OFF', label='HANDED_OFF'"
    " WHERE state='FAILED_TO_GCP' AND outcome='handed-off';"
    " UPDATE dispatches SET state='HANDOFF_FAILED', label='HANDOFF_FAILED'"
    " WHERE state='FAILED_TO_GCP' AND outcome='handoff-failed';"
    " UPDATE dispatches SET state='NO_LANE_LEFT', label='NO_LANE_LEFT'"
    " WHERE state='FAILED_TO_GCP' AND outcome='no-fallback-lane';"
    " UPDATE dispatches SET state='REFUSED', label='REFUSED' WHERE final=1 AND outcome LIKE 'rejected: %';",
    # A paid run is followed to its end and counted (issue 27): one row per handoff, written with its steps.
    3: PAID_RUNS,
    4: DISPATCH_INDEXES,
    # A free job is followed to its end (issue 38): one row per ended job, written with its end step. A journal
    # written before keeps its RUNNING dispatches final (they were never followed).
    5: ENDS,
    # The notifications' outbox (issue 39): two new tables, nothing else changed.
    6: OUTBOX,
    # The outbox without the UNIQUE index on event_id (issue 40: each event cost an index entry at a random place).
    7: OUTBOX_8,
}
SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dispatches (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    intent TEXT NOT NULL,
    lane TEXT NOT NULL,
    pinned INTEGER NOT NULL,
    spec TEXT NOT NULL,
    ladder TEXT NOT NULL,
    state TEXT NOT NULL,
    label TEXT NOT NULL,
    qos TEXT,
    job_id TEXT,
    final INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    dispatch_id TEXT NOT NULL REFERENCES dispatches(id),
    at REAL NOT NULL,
    source TEXT NOT NULL,
    dest TEXT NOT NULL,
    trigger TEXT NOT NULL,
    rung_index INTEGER NOT NULL,
    qos TEXT NOT NULL,
    job_id TEXT,
    reason TEXT,
    note TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS transitions_by_dispatch ON transitions(dispatch_id, seq);
CREATE TABLE IF NOT EXISTS jobs (
    dispatch_id TEXT NOT NULL REFERENCES dispatches(id),
    rung_index INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (dispatch_id, rung_index)
);
CREATE TABLE IF NOT EXISTS handoffs (
    dispatch_id TEXT PRIMARY KEY REFERENCES dispatches(id),
    lane TEXT NOT NULL,
    argv TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    exit_status INTEGER,
    stdout TEXT,
    stderr TEXT,
    status TEXT NOT NULL,
    pid INTEGER
);
"""
    + PAID_RUNS
    + DISPATCH_INDEXES
    + ENDS
    + OUTBOX
)


@attrs.frozen
class DispatchRow:
    """A dispatch as the journal keeps it (static facts plus its latest state)."""

    id: str
    created_at: float
    intent: str
    lane: str
    pinned: bool
    spec: dict[str, Any]
    ladder: list[dict[str, Any]]
    state: str
    label: str
    qos: str | None
    job_id: str | None
    final: bool
    outcome: str
    updated_at: float
    settings: dict[str, Any] = attrs.field(factory=dict)
    """What the dispatch was created with beyond its ladder (fallback lane, router options, config file)."""


@attrs.frozen
class Listing:
    """A dispatch as ``status`` lists it: its latest state and the lane it is on, no JSON column to parse."""

    dispatch_id: str
    name: str
    label: str
    final: bool
    outcome: str
    qos: str | None
    job_id: str | None
    lane: str
    """The lane of its handoff if it has one, else its own."""
    updated_at: float


@attrs.frozen
class JobRow:
    """The SLURM job a rung of a dispatch got."""

    dispatch_id: str
    rung_index: int
    job_id: str
    at: float


@attrs.frozen
class HandoffRow:
    """A handoff to a fallback lane: its command, and (once it ran) its exit status and output."""

    dispatch_id: str
    lane: str
    argv: list[str]
    started_at: float
    finished_at: float | None
    exit_status: int | None
    stdout: str | None
    stderr: str | None
    status: str
    """``started`` (written before the command runs), ``done``, or ``failed``."""
    pid: int | None = None
    """The process group of the running command (journaled right after it starts), to adopt it after a crash."""


def dispatch_row(row: sqlite3.Row) -> DispatchRow:
    values = dict(row)
    values["pinned"] = bool(values["pinned"])
    values["final"] = bool(values["final"])
    values["spec"] = json.loads(values["spec"])
    values["ladder"] = json.loads(values["ladder"])
    values["settings"] = json.loads(values.get("settings") or "{}")
    return DispatchRow(**values)
