"""The driver lock (journal/lock.py): one driver per journal at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm import JournalError
from fellows_fsm.journal.store import Journal


def test_second_driver_is_refused_and_the_first_keeps_driving(tmp_path: Path) -> None:
    """While one Journal drives, a second acquire names the holder; after release it succeeds."""
    first = Journal(tmp_path / "j.sqlite3")
    first.acquire_driver()
    second = Journal(tmp_path / "j.sqlite3")
    with pytest.raises(JournalError, match=r"driven by another router \(pid \d+ on .+\)"):
        second.acquire_driver()
    first.release_driver()
    second.acquire_driver()
    second.close()
    first.close()
