"""The driver's wake-up FIFO (driver/wake.py): a command's wake reaches a listening driver, and tells nobody (writing
nothing anywhere) when the FIFO is missing, unwritable or replaced; ``wake_problem`` names each case in one line."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from fellows_fsm.driver.wake import WakeChannel, wake, wake_path, wake_problem


def _listening(journal: Path) -> WakeChannel:
    channel = WakeChannel(journal, threading.Event())
    channel.open()
    return channel


def test_a_wake_reaches_the_listening_driver_once(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    channel = _listening(journal)
    try:
        assert wake_problem(journal) is None
        assert not channel.woken()
        assert wake(journal)
        assert wake(journal)
        assert channel.woken()  # two wake-ups, answered together
        assert not channel.woken()
    finally:
        channel.close()


def test_with_no_driver_listening_nobody_is_told(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    _listening(journal).close()  # the FIFO stays, nobody has it open
    assert not wake(journal)


def test_a_deleted_fifo_tells_nobody_and_is_named(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    channel = _listening(journal)
    try:
        wake_path(journal).unlink()
        assert not wake(journal)
        assert wake_problem(journal) == f"the wake-up FIFO {wake_path(journal)} is missing"
        assert not channel.woken()
    finally:
        channel.close()


def test_a_regular_file_in_the_fifos_place_is_not_written_to(tmp_path: Path) -> None:
    """A file put where the FIFO was: writable, but no driver reads it. Nobody is told, and it stays as it was (a
    wake that wrote a byte into it would say it woke the driver, and grow the file at every submit)."""
    journal = tmp_path / "journal.sqlite3"
    channel = _listening(journal)
    try:
        wake_path(journal).unlink()
        wake_path(journal).write_bytes(b"")
        assert not wake(journal)
        assert wake_path(journal).read_bytes() == b""
        assert wake_problem(journal) == f"{wake_path(journal)} is not a FIFO"
        assert not channel.woken()
    finally:
        channel.close()


def test_a_directory_in_the_fifos_place_is_unwritable_even_for_root(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    channel = _listening(journal)
    try:
        wake_path(journal).unlink()
        wake_path(journal).mkdir()
        assert not wake(journal)
        assert wake_problem(journal) == f"{wake_path(journal)} is not a FIFO"
        assert not channel.woken()
    finally:
        channel.close()


def test_a_driver_started_with_something_else_at_the_fifos_path_listens_to_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    wake_path(journal).mkdir()
    channel = _listening(journal)
    try:
        assert channel._fd is None  # the poll drives alone
        channel.sleep(0.01)
        assert not channel.woken()
    finally:
        channel.close()


def test_an_fifo_without_write_permission_is_named(tmp_path: Path) -> None:
    """chmod 000: unwritable for any user but root (root's writes pass file modes, so only the name is checked)."""
    journal = tmp_path / "journal.sqlite3"
    _listening(journal).close()
    wake_path(journal).chmod(0)
    if os.geteuid() == 0:
        assert wake_problem(journal) is None  # root may write it: it is no problem for root's commands
    else:
        assert wake_problem(journal) == f"the wake-up FIFO {wake_path(journal)} is not writable"
        assert not wake(journal)
