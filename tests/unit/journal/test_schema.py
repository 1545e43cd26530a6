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
