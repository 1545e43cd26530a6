"""The journal's filesystem check: network filesystems (by statfs type) refused for driving, local ones kept, the
override without WAL, and the refusal through the CLI."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from fellows_fsm import cli
from fellows_fsm.errors import JournalError
from fellows_fsm.journal import statefs
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui import app as ui_app

TYPES = [
    (0x6969, "NFS", True),
    (0x0BD00BD0, "Lustre", True),
    (0x47504653, "GPFS (IBM Spectrum Scale)", True),
    (0xFF534D42, "CIFS", True),
    (0xFE534D42, "SMB2", True),
    (0x01021994, "tmpfs", False),
    (0xEF53, "ext2/3/4", False),
    (0x58465342, "XFS", False),
]


def _pose_as(monkeypatch: pytest.MonkeyPatch, magic: int) -> None:
    """Make every path read as statfs type ``magic``."""
    monkeypatch.setattr(statefs, "statfs_type", lambda path: magic)


@pytest.mark.parametrize(("magic", "name", "network"), TYPES, ids=[t[1] for t in TYPES])
def test_filesystems_are_told_by_their_statfs_type(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, magic: int, name: str, network: bool
) -> None:
    """NFS, Lustre, GPFS, CIFS and SMB2 are network filesystems; tmpfs, ext4 and XFS are local."""
    _pose_as(monkeypatch, magic)
    assert statefs.filesystem_of(tmp_path) == statefs.Filesystem(magic, name, network)


def test_the_real_statfs_reads_this_machine() -> None:
    """The real statfs(2) call reads /dev/shm as tmpfs, a local filesystem."""
    fs = statefs.filesystem_of(Path("/dev/shm"))
    assert (fs.magic, fs.network) == (0x01021994, False)


def test_a_state_dir_not_made_yet_is_judged_by_its_parent(tmp_path: Path) -> None:
    """A path that does not exist yet reads as the filesystem of its nearest existing parent."""
    assert statefs.filesystem_of(tmp_path / "a" / "b") == statefs.filesystem_of(tmp_path)


def test_a_journal_on_nfs_is_refused_for_driving_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Opening a journal to drive on NFS raises one JournalError naming the filesystem and the fixes."""
    _pose_as(monkeypatch, 0x6969)
    with pytest.raises(JournalError, match=r"on NFS \(statfs type 0x6969\).*state_dir.*\[fellows\] host") as caught:
        Journal(tmp_path / "journal.sqlite3")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "journal.sqlite3").exists()


def test_the_override_drives_without_wal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """allow_network_fs opens the journal on Lustre with SQLite's rollback journal, not WAL."""
    _pose_as(monkeypatch, 0x0BD00BD0)
    journal = Journal(tmp_path / "journal.sqlite3", allow_network_fs=True)
    journal.close()
    with closing(sqlite3.connect(tmp_path / "journal.sqlite3")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_journal_on_a_network_fs_still_opens_read_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """status and history read a journal on GPFS: the read-only open is not refused."""
    Journal(tmp_path / "journal.sqlite3").close()
    _pose_as(monkeypatch, 0x47504653)
    journal = Journal(tmp_path / "journal.sqlite3", readonly=True)
    assert journal.dispatches() == []
    journal.close()


def test_the_cli_refuses_to_submit_and_still_shows_status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On NFS `submit` exits 7 with one line naming NFS and nothing queued; `status` exits 0."""
    (tmp_path / "fellows.toml").write_text(f'state_dir = "{tmp_path / "state"}"\n', encoding="utf-8")
    (tmp_path / "train.sbatch").write_text("#!/bin/bash\n#SBATCH --gres=gpu:8\nsleep 1\n", encoding="utf-8")
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(tmp_path / "fellows.toml"))
    submitted: list[object] = []
    monkeypatch.setattr(ui_app, "make_scheduler", lambda config: submitted.append(config) or None)
    _pose_as(monkeypatch, 0x6969)
    runner = CliRunner()
    refused = runner.invoke(cli.main, ["submit", "--detach", str(tmp_path / "train.sbatch")])
    assert refused.exit_code == 7
    (line,) = refused.stderr.splitlines()
    assert "is on NFS" in line
    assert not (tmp_path / "state" / "journal.sqlite3").exists()
    status = runner.invoke(cli.main, ["status"])
    assert status.exit_code == 0, status.output
