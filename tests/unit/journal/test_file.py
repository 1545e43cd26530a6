"""The journal's file (journal/file.py): what it refuses to open and leaves untouched (not a database, a directory,
another program's SQLite file, a damaged page), and a read-only open that never writes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fellows_fsm import JobSpec, JournalError
from fellows_fsm.core.effects import Record, Step
from fellows_fsm.journal.store import Journal
from tests.unit.journal.journals import SPEC, _journal_with_a_dispatch


def test_corrupt_journal_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """A file that is not an SQLite journal gives a JournalError naming it, and its bytes stay as they were."""
    path = tmp_path / "journal.sqlite3"
    garbage = b"this is not a database\x00\x01" * 100
    path.write_bytes(garbage)
    with pytest.raises(JournalError, match=rf"journal {path} is unreadable or damaged .*point.* state_dir elsewhere"):
        Journal(path)
    assert path.read_bytes() == garbage


def test_unreadable_journal_is_refused(tmp_path: Path) -> None:
    """A journal path that cannot be opened (a directory) gives a JournalError naming it."""
    path = tmp_path / "journal.sqlite3"
    path.mkdir()
    with pytest.raises(JournalError, match=rf"journal {path}"):
        Journal(path)


def test_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """Another program's SQLite file at the journal's path is refused, not extended with our tables."""
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(JournalError, match="not a fellows-fsm journal"):
        Journal(path)
    assert path.read_bytes() == before


def test_readonly_journal_reads_without_writing(tmp_path: Path) -> None:
    """A read-only open sees every dispatch and refuses writes; the file's bytes do not change."""
    journal, _ = _journal_with_a_dispatch(tmp_path)
    journal.close()
    before = (tmp_path / "journal.sqlite3").read_bytes()
    reader = Journal(tmp_path / "journal.sqlite3", readonly=True)
    assert [r.id for r in reader.dispatches()] == ["d1"]
    with pytest.raises(JournalError, match="write failed"):
        reader.record(Record("d1", Step(1.0, "SUBMITTED_high_eur", "X", "recall", 0, "high-eur", None), "X", True))
    reader.close()
    assert (tmp_path / "journal.sqlite3").read_bytes() == before


def test_a_damaged_page_is_a_journal_error_not_a_traceback(tmp_path: Path) -> None:
    """Garbage over the journal's later pages turns a read into a JournalError that says to keep the file."""
    journal, _ = _journal_with_a_dispatch(tmp_path)
    for i in range(200):
        journal.add_lane_dispatch(f"x{i:03d}", SPEC, intent="prod", lane="gcp", at=float(i))
    journal.close()
    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    path = tmp_path / "journal.sqlite3"
    data = bytearray(path.read_bytes())
    data[3 * page :] = b"\xff" * (len(data) - 3 * page)
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"unreadable or damaged .*keep the file"):
        _read_everything(path)


def _read_everything(path: Path) -> None:
    """Open the journal read-only and read every dispatch (closing it whatever happens)."""
    reader = Journal(path, readonly=True)
    try:
        reader.dispatches()
    finally:
        reader.close()


def _damage(path: Path) -> None:
    """Write garbage over every page of an SQLite file after its first two."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    data[2 * page :] = b"\xff" * (len(data) - 2 * page)
    path.write_bytes(bytes(data))


def test_a_journal_with_a_damaged_page_is_refused_for_writing_and_left_as_it_was(tmp_path: Path) -> None:
    """Opening a damaged journal to write raises JournalError saying to keep the file, and changes no byte."""
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path)
    for i in range(300):
        journal.add_lane_dispatch(
            f"d{i:04d}", JobSpec("train", "train.sbatch", gpus=8), intent="prod", lane="gcp", at=1.0
        )
    journal.close()
    _damage(path)
    before = path.read_bytes()
    with pytest.raises(JournalError, match=r"unreadable or damaged .*keep the file"):
        Journal(path)
    assert path.read_bytes() == before


def test_a_damaged_journal_stops_submit_before_anything_is_queued(tmp_path: Path) -> None:
    """submit --detach on a journal with a damaged page exits 7 with one line, through the installed command."""
    state = tmp_path / "state"
    journal = Journal(state / "journal.sqlite3")
    for i in range(300):
        journal.add_lane_dispatch(
            f"d{i:04d}", JobSpec("train", "train.sbatch", gpus=8), intent="prod", lane="gcp", at=1.0
        )
    journal.close()
    _damage(state / "journal.sqlite3")
    ledger = tmp_path / "gcp.ledger"
    (tmp_path / "fellows.toml").write_text(
        f'state_dir = "{state}"\n[lanes.gcp]\ncommand = ["{sys.executable}", "-c", '
        f"\"open('{ledger}', 'a').write('paid')\"]\n"
    )
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\nsleep 1\n")
    fellows_fsm = Path(sys.executable).with_name("fellows-fsm")
    result = subprocess.run(
        [
            str(fellows_fsm),
            "--config",
            str(tmp_path / "fellows.toml"),
            "submit",
            "--detach",
            "--pin",
            "gcp",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 7, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "damaged" in result.stderr
    assert not ledger.exists()


def test_a_row_that_is_not_utf8_refuses_the_journal_for_writing(tmp_path: Path) -> None:
    """A dispatch whose label is not UTF-8 (quick_check passes it): opening to write is one JournalError."""
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal:
        journal.add_lane_dispatch("d1", JobSpec("j", "/j.sh"), intent="prod", lane="gcp", at=1.0)
    db = sqlite3.connect(path)
    db.execute("UPDATE dispatches SET label = CAST(X'c328' AS TEXT)")
    db.commit()
    db.close()
    kept = path.read_bytes()
    with pytest.raises(JournalError, match="unreadable or damaged") as caught:
        Journal(path)
    assert "\n" not in str(caught.value)
    assert path.read_bytes() == kept


def test_a_journal_is_read_and_written_from_another_thread(tmp_path: Path) -> None:
    """One Journal opened in one thread reads and writes from another (one connection, used under a lock)."""
    journal = Journal(tmp_path / "journal.sqlite3")
    found: list[object] = []
    thread = threading.Thread(target=lambda: (journal.put_meta("k", {"v": 1}), found.append(journal.get_meta("k"))))
    thread.start()
    thread.join(timeout=10)
    assert found == [{"v": 1}]
    journal.close()


def test_a_closed_handle_is_not_called_damaged(tmp_path: Path) -> None:
    """A read through a closed Journal says the handle is closed and the file is not damaged (no advice to move it)."""
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.close()
    with pytest.raises(JournalError, match="the file is not damaged") as raised:
        journal.dispatches()
    assert "state_dir elsewhere" not in str(raised.value)
