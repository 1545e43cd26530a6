"""The journal: write-ahead rows, one driver at a time, clear errors that change nothing."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from freezegun import freeze_time

from fellows_fsm import Dispatch, FakeScheduler, FellowsConfig, JobSpec, JournalError, Step
from fellows_fsm.core.effects import Command, Record
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.vocab import HandoffStatus, Trigger
from fellows_fsm.journal.schema import SCHEMA_VERSION
from fellows_fsm.journal.store import Journal
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.testing import Driven

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)


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


def test_steps_are_committed_before_the_side_effect(tmp_path: Path) -> None:
    """The submit step is readable by another connection before the scheduler is called."""
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    seen: list[list[str]] = []

    class Spy(FakeScheduler):
        def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
            other = sqlite3.connect(path)
            seen.append([r[0] for r in other.execute("SELECT trigger FROM transitions")])
            other.close()
            return super().submit(spec, qos=qos, token=token, deadline=deadline)

    with freeze_time("2026-11-30 12:00:00"):
        d = Driven(Dispatch("w1", SPEC, FellowsConfig(park_cap_seconds=60).ladder), Spy(), journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
    assert seen == [["submit"]]
    assert [j.job_id for j in journal.jobs("w1")] == [d.job_id]
    journal.close()


def test_steps_round_trip(tmp_path: Path) -> None:
    """Every journaled step reads back equal, in order."""
    journal = Journal(tmp_path / "j.sqlite3")
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as frozen:
        d = Driven(Dispatch("w2", SPEC, FellowsConfig(park_cap_seconds=60).ladder), fake, journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
        frozen.tick(60)
        assert d.job_id is not None
        d.advance(fake.observe([d.job_id])[d.job_id])
    steps: list[Step] = journal.steps("w2")
    assert steps == d.history
    assert [s.trigger for s in steps] == ["submit", "park", "cancel", "resubmit"]
    journal.close()


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


def test_batch_commits_its_steps_together(tmp_path: Path) -> None:
    """Inside a batch, steps are invisible to other readers until the batch commits, then all appear."""
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    fake = FakeScheduler()

    def count() -> int:
        other = sqlite3.connect(path)
        n = other.execute("SELECT count(*) FROM transitions WHERE trigger='park'").fetchone()[0]
        other.close()
        return int(n)

    with freeze_time("2026-11-30 12:00:00") as frozen:
        ds = [
            Driven(Dispatch(f"b{i}", SPEC, FellowsConfig(park_cap_seconds=60).ladder), fake, journal) for i in range(3)
        ]
        for d in ds:
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
            d.submit()
        frozen.tick(60)
        with journal.batch():
            for d in ds:
                d.advance(None, may_change_rung=False)
            assert count() == 0
        assert count() == 3
    journal.close()


def test_failed_write_in_a_batch_aborts_only_its_transition(tmp_path: Path) -> None:
    """A step whose write fails inside a batch is not journaled and stops the tick; the others are committed."""
    journal = Journal(tmp_path / "j.sqlite3")
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as frozen:
        ds = [
            Driven(Dispatch(f"c{i}", SPEC, FellowsConfig(park_cap_seconds=60).ladder), fake, journal) for i in range(2)
        ]
        for d in ds:
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
            d.submit()
        frozen.tick(60)
        ds[1].d.id = "not-journaled"  # its rows now violate the foreign key: the write fails
        with journal.batch():
            ds[0].advance(None, may_change_rung=False)
            with pytest.raises(JournalError, match="write failed"):
                ds[1].advance(None, may_change_rung=False)
        assert [s.trigger for s in journal.steps("c0")] == ["submit", "park"]
        assert [s.trigger for s in journal.steps("c1")] == ["submit"]  # a restart resumes it on its rung
        assert fake.calls["cancel_if_pending"] == 0
    journal.close()


def _journal_with_a_dispatch(tmp_path: Path) -> tuple[Journal, Driven]:
    journal = Journal(tmp_path / "journal.sqlite3")
    with freeze_time("2026-11-30 12:00:00"):
        d = Driven(Dispatch("d1", SPEC, FellowsConfig(park_cap_seconds=60).ladder), FakeScheduler(), journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
    return journal, d


def test_a_deleted_journal_is_noticed_by_the_next_tick(tmp_path: Path) -> None:
    """Deleting the journal under a driving router makes check_intact raise, naming the live dispatch and its job."""
    journal, d = _journal_with_a_dispatch(tmp_path)
    journal.check_intact()  # intact: no error
    journal.path.unlink()
    with pytest.raises(
        JournalError, match=rf"journal {journal.path} was deleted or replaced.*d1 \(SLURM job {d.job_id}\)"
    ):
        journal.check_intact()
    journal.close()


def test_a_replaced_journal_is_noticed(tmp_path: Path) -> None:
    """A journal file swapped for another one (same path, new inode) is refused like a deleted one."""
    journal, _ = _journal_with_a_dispatch(tmp_path)
    replacement = tmp_path / "other.sqlite3"
    Journal(replacement).close()
    replacement.replace(journal.path)
    with pytest.raises(JournalError, match="was deleted or replaced"):
        journal.check_intact()
    journal.close()


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


def _read_everything(path: Path) -> None:
    """Open the journal read-only and read every dispatch (closing it whatever happens)."""
    reader = Journal(path, readonly=True)
    try:
        reader.dispatches()
    finally:
        reader.close()


def test_listings_are_the_status_columns_of_every_dispatch(tmp_path: Path) -> None:
    """listings() gives each dispatch's id, name, label, job and lane (a handoff's lane joined in), oldest first."""
    journal = Journal(tmp_path / "j.sqlite3")
    clock = SimClock(1_700_000_000.0)
    fake = FakeScheduler(clock)
    ladder = FellowsConfig(park_cap_seconds=600).ladder
    for i, name in enumerate(["first", "second", "third"]):
        d = Driven(Dispatch(f"d{i}", JobSpec(name=name, script="x.sbatch", gpus=8), ladder), fake, journal, clock)
        if i == 1:  # pinned straight to the gcp lane: its row ends with its handoff (a ladder one takes a step)
            journal.add_lane_dispatch(d.id, d.spec, intent="prod", lane="gcp", at=1_700_000_000.0 + i)
            continue
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=False, intent="prod", at=1_700_000_000.0 + i)
        d.submit()
    _command_steps(journal, "d1", "gcp")
    listed = journal.listings()
    assert [(r.dispatch_id, r.name, r.lane, r.final) for r in listed] == [
        ("d0", "first", "fellows", False),
        ("d1", "second", "gcp", True),
        ("d2", "third", "fellows", False),
    ]
    full = {r.id: r for r in journal.dispatches()}
    for r in listed:
        row = full[r.dispatch_id]
        assert (r.label, r.outcome, r.qos, r.job_id, r.updated_at) == (
            row.label,
            row.outcome,
            row.qos,
            row.job_id,
            row.updated_at,
        )
    assert [r.dispatch_id for r in journal.listings(live_only=True)] == ["d0", "d2"]
    journal.close()


def _command_steps(journal: Journal, dispatch_id: str, lane: str) -> None:
    """Journal a lane-pinned dispatch's command as the driver does: started (hand_off), then done (handed_off)."""
    d = LaneDispatch.restore(dispatch_id, lane, state="", history=journal.steps(dispatch_id))
    started = Command(HandoffStatus.STARTED, lane, ("true",))
    journal.write([attrs.evolve(e, command=started) for e in d.fire(Trigger.HAND_OFF, 1_700_000_010.0).effects])
    done = Command(HandoffStatus.DONE, exit_status=0)
    journal.write([attrs.evolve(e, command=done) for e in d.fire(Trigger.HANDED_OFF, 1_700_000_011.0).effects])


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
