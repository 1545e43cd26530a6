"""A lane command that fails leaves nothing behind (its group and every descendant ended before the failure is
recorded), and a journal with a damaged page is refused for writing before anything is done."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fellows_fsm.config import LaneConfig
from fellows_fsm.errors import JournalError
from fellows_fsm.journal import Journal
from fellows_fsm.lanes import CommandLane, HandoffFiles, HandoffResult
from fellows_fsm.scheduler import JobSpec


def _processes_with(tag: str) -> list[str]:
    """Every live (not zombie) process whose command line holds ``tag``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if tag.encode() in cmdline and state not in (b"Z", b"X"):
            words = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry}: {words}")
    return found


def _run_to_end(command: tuple[str, ...], tmp_path: Path, *, timeout: float = 60) -> HandoffResult:
    """Start ``command`` as a lane's handoff and look at it until it has a result."""
    lane = CommandLane(LaneConfig(name="gcp", command=command, timeout_seconds=timeout))
    handoff = lane.start(command, HandoffFiles(tmp_path / "handoffs", "abc123"), now=time.time())
    while (result := handoff.result(time.time())) is None:
        time.sleep(0.02)
    return result


# Each forks a child that would "create the paid job" 8 s later (one in the group, one that left it with setsid),
# then fails: a non-zero exit, a signal, or hanging until the timeout.
FAILURES = {
    "exit 3": ("exit 3", 60.0, 3),
    "killed by a signal": ("kill -9 $$", 60.0, -9),
    "timed out": ("sleep 100", 1.0, 124),
}


@pytest.mark.parametrize("how", list(FAILURES), ids=list(FAILURES))
def test_a_failed_handoff_leaves_no_process_that_could_still_pay(tmp_path: Path, how: str) -> None:
    """After a lane command fails, no process it started is left (not even one in a new session, or one that
    ignores SIGTERM), so the job it meant to create never appears."""
    tail, timeout, status = FAILURES[how]
    marker = tmp_path / f"paid-{uuid.uuid4().hex}"
    late = f"trap '' TERM; sleep 8; echo paid >> {marker}"
    code = f'(sleep 8; echo paid >> {marker}) & setsid sh -c "{late}" & {tail}'
    result = _run_to_end(("sh", "-c", code), tmp_path, timeout=timeout)
    assert result.exit_status == status
    assert _processes_with(str(marker)) == []  # nothing is left that could write the marker later
    assert not marker.exists()


def test_a_successful_handoff_may_leave_its_own_daemon(tmp_path: Path) -> None:
    """A command that exits 0 has handed the job over: a daemon it left (``--async`` work) is not killed."""
    tag = uuid.uuid4().hex
    code = f"setsid sh -c 'sleep 30 # {tag}' </dev/null >/dev/null 2>&1 & exit 0"
    result = _run_to_end(("sh", "-c", code), tmp_path)
    assert result.ok
    left = _processes_with(tag)
    assert len(left) == 1, left
    os.kill(int(left[0].split(":")[0]), 9)


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
