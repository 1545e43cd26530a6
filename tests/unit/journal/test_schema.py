"""The journal's schema (journal/schema.py): a newer version is refused, older ones are upgraded in place by its
migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fellows_fsm import JournalError
from fellows_fsm.journal.schema import SCHEMA_VERSION
from fellows_fsm.journal.store import Journal
from tests.unit.journal.journals import _journal_with_a_dispatch


def test_journal_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    """A journal with an unknown schema version is refused, naming both versions, and left untouched."""
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    before = path.read_bytes()
    with pytest.raises(JournalError, match="schema version 99"):
        Journal(path)
    assert path.read_bytes() == before


def test_a_version_1_journal_is_upgraded_in_place(tmp_path: Path) -> None:
    """A journal written by schema 1 opens for driving, gains the new columns, and keeps its rows."""
    journal, _ = _journal_with_a_dispatch(tmp_path)
    journal.close()
    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    db.executescript(
        "ALTER TABLE handoffs DROP COLUMN pid; ALTER TABLE dispatches DROP COLUMN settings; PRAGMA user_version=1;"
    )
    db.close()
    upgraded = Journal(tmp_path / "journal.sqlite3")
    [row] = upgraded.dispatches()
    assert (row.id, row.settings) == ("d1", {})
    assert upgraded._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # every step applied
    upgraded.close()


def test_a_version_2_journal_says_how_its_dispatches_ended(tmp_path: Path) -> None:
    """Schema 2 kept a handed-off or refused dispatch in FAILED_TO_GCP (or its first rung) with only the outcome
    to tell; opened by schema 3, its state is the row of the table it ended by, and a live one is left alone."""
    journal, _ = _journal_with_a_dispatch(tmp_path)
    journal.close()
    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    for new_id, state, outcome, final in (
        ("h1", "FAILED_TO_GCP", "handed-off", 1),
        ("h2", "FAILED_TO_GCP", "handoff-failed", 1),
        ("h3", "FAILED_TO_GCP", "no-fallback-lane", 1),
        ("r1", "SUBMITTED_high_eur", "rejected: bad script", 1),
        ("f1", "FAILED_TO_GCP", "", 0),
    ):
        db.execute(
            "INSERT INTO dispatches (id, created_at, intent, lane, pinned, spec, ladder, state, label, qos, job_id,"
            " final, outcome, updated_at, settings) SELECT ?, created_at, intent, lane, pinned, spec, ladder, ?, ?,"
            " qos, job_id, ?, ?, updated_at, settings FROM dispatches WHERE id='d1'",
            (new_id, state, state, final, outcome),
        )
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    upgraded = Journal(tmp_path / "journal.sqlite3")
    states = {r.id: (r.state, r.label) for r in upgraded.dispatches()}
    assert states["h1"] == ("HANDED_OFF", "HANDED_OFF")
    assert states["h2"] == ("HANDOFF_FAILED", "HANDOFF_FAILED")
    assert states["h3"] == ("NO_LANE_LEFT", "NO_LANE_LEFT")
    assert states["r1"] == ("REFUSED", "REFUSED")
    assert states["f1"] == ("FAILED_TO_GCP", "FAILED_TO_GCP")
    upgraded.close()


OUTBOX_7 = """
CREATE TABLE outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    dispatch_id TEXT NOT NULL,
    event TEXT NOT NULL,
    at REAL NOT NULL,
    step_seq INTEGER,
    facts TEXT NOT NULL,
    body TEXT
);
"""
"""Schema 7's outbox, with the UNIQUE index on ``event_id`` that schema 8 dropped."""


def _outbox_indexes(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='outbox'")]
    finally:
        db.close()


def test_a_version_7_journal_keeps_its_events_and_their_seqs_without_the_event_id_index(tmp_path: Path) -> None:
    """Schema 8 rebuilds the outbox without its event_id index: every event kept with its seq, id, facts and body,
    and the next event numbered after the last one ever journaled (the last was deleted: a seq is never reused)."""
    journal, _ = _journal_with_a_dispatch(tmp_path)
    ids = [journal.put_event("d1", "budget_threshold", float(i), {"n": i}) for i in range(3)]
    journal.fix_body(2, "the exact bytes")
    journal.close()
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(
        "BEGIN; ALTER TABLE outbox RENAME TO outbox_8_kept;"
        + OUTBOX_7
        + "INSERT INTO outbox SELECT * FROM outbox_8_kept; DROP TABLE outbox_8_kept;"
        " DELETE FROM outbox WHERE seq = (SELECT max(seq) FROM outbox); PRAGMA user_version=7; COMMIT;"
    )
    before = db.execute("SELECT * FROM outbox ORDER BY seq").fetchall()
    last = db.execute("SELECT seq FROM sqlite_sequence WHERE name='outbox'").fetchone()[0]
    db.close()
    assert _outbox_indexes(path) == ["sqlite_autoindex_outbox_1"]
    assert len(before) == 3  # the dispatch's queued event and two of the three thresholds
    upgraded = Journal(path)
    try:
        assert upgraded._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [tuple(r) for r in upgraded._db.execute("SELECT * FROM outbox ORDER BY seq")] == before
        assert [e.event_id for e in upgraded.events_of("d1")][1:] == ids[:2]
        assert upgraded.event(2) is not None
        assert upgraded.event(2).body == "the exact bytes"  # type: ignore[union-attr]
        later = upgraded.put_event("d1", "budget_threshold", 9.0, {"n": 9})
        assert [(e.seq, e.event_id) for e in upgraded.events_of("d1")][-1] == (last + 1, later)
    finally:
        upgraded.close()
    assert _outbox_indexes(path) == []
