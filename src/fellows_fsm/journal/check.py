"""The full check of a journal file (every page, every row) and the mark that says one is due.

Opening a journal to write reads only what it will use (file.py: ``JournalFile._check_live``); the whole file is
read where damage may be: after a write that a full disk cut short (``mark_check_due``, here), after a driver that
did not end cleanly (store.py: ``Journal.acquire_driver``), and when asked (``fellows-fsm journal check``). A process
that dies cannot damage an SQLite file (its commit is atomic), but a machine that went down with it, or a full
disk under a write, is where a torn page would be found.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

__all__ = ["TABLES", "check_due", "check_pages", "check_path", "clear_check_due", "mark_check_due"]

TABLES = ("meta", "dispatches", "transitions", "jobs", "handoffs", "paid_runs")
"""Every table of the schema (schema.py)."""


def due_path(journal: Path) -> Path:
    """The mark beside the journal that says its next open to write reads every page."""
    return journal.with_name(journal.name + ".check-due")


def mark_check_due(journal: Path) -> None:
    """Leave the mark (best effort: an empty file needs no data block, so it is made on a full disk too)."""
    with contextlib.suppress(OSError):
        due_path(journal).touch()


def check_due(journal: Path) -> bool:
    """Is a full check due (one stat)?"""
    return due_path(journal).exists()


def clear_check_due(journal: Path) -> None:
    """The full check passed: remove the mark."""
    with contextlib.suppress(OSError):
        due_path(journal).unlink()


def check_pages(db: sqlite3.Connection, schema: str = "main") -> None:
    """Raise sqlite3.DatabaseError if SQLite's quick_check finds a damaged page of ``schema`` (every page is read
    once), or if a row cannot be read as ``status`` and the driver read it (text that is not UTF-8, which
    quick_check passes): every row of every table is read."""
    problems = [row[0] for row in db.execute(f"PRAGMA {schema}.quick_check(3)").fetchall()]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError("; ".join(problems).replace("\n", " "))
    present = {r[0] for r in db.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type='table'")}  # noqa: S608 - our own schema names
    for table in TABLES:
        if table in present:
            for _ in db.execute(f"SELECT * FROM {schema}.{table}"):  # noqa: S608 - our own table names
                pass


def check_path(path: Path) -> None:
    """The full check of the SQLite file at ``path`` through a read-only connection of its own (the archive)."""
    uri = path.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=10.0)
    try:
        check_pages(db)
    finally:
        db.close()
