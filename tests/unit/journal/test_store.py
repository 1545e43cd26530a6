"""The journal: write-ahead rows, one driver at a time, clear errors that change nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs
import pytest
from freezegun import freeze_time

from fellows_fsm import Dispatch, FakeScheduler, JobSpec, JournalError, SlurmSettings, Step
from fellows_fsm.core.effects import Command, Record
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.vocab import HandoffStatus, Trigger
from fellows_fsm.journal.store import Journal
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.testing import Driven
from tests.unit.journal.journals import SPEC, _journal_with_a_dispatch


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
        d = Driven(Dispatch("w1", SPEC, SlurmSettings(park_cap_seconds=60).ladder), Spy(), journal)
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
        d = Driven(Dispatch("w2", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
        frozen.tick(60)
        assert d.job_id is not None
        d.advance(fake.observe([d.job_id])[d.job_id])
    steps: list[Step] = journal.steps("w2")
    assert steps == d.history
    assert [s.trigger for s in steps] == ["submit", "park", "cancel", "resubmit"]
    journal.close()


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
            Driven(Dispatch(f"b{i}", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal) for i in range(3)
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
            Driven(Dispatch(f"c{i}", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal) for i in range(2)
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


def test_listings_are_the_status_columns_of_every_dispatch(tmp_path: Path) -> None:
    """listings() gives each dispatch's id, name, label, job and lane (a handoff's lane joined in), oldest first."""
    journal = Journal(tmp_path / "j.sqlite3")
    clock = SimClock(1_700_000_000.0)
    fake = FakeScheduler(clock)
    ladder = SlurmSettings(park_cap_seconds=600).ladder
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


def test_final_since_reads_the_dispatches_that_ended_at_or_after_a_time(tmp_path: Path) -> None:
    """final_since(t) is what `watch` adds to the live ones: a dispatch that ended at or after t, never one still
    live or one that ended before t."""
    journal = Journal(tmp_path / "journal.sqlite3")
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as clock:
        ended = Driven(Dispatch("e1", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal)
        live = Driven(Dispatch("l1", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal)
        for d in (ended, live):
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
            d.submit()
        clock.tick(10)
        assert ended.job_id is not None
        fake.start(ended.job_id)
        ended.advance(fake.observe([ended.job_id])[ended.job_id])
        fake.end(ended.job_id)
        ended.advance(fake.observe([ended.job_id])[ended.job_id])
        assert ended.is_final
        row = journal.dispatch("e1")
        assert row is not None
        at = row.updated_at
    assert [r.id for r in journal.final_since(at)] == ["e1"]
    assert [r.id for r in journal.final_since(at - 5)] == ["e1"]
    assert journal.final_since(at + 0.001) == []
    journal.close()


def _step(trigger: str, dest: str, at: float) -> Step:
    return Step(at, "SUBMITTED_high_eur", dest, trigger, rung_index=0, qos="high-eur", job_id="7")


def test_a_step_of_a_live_dispatch_updates_its_row_and_keeps_it_listed_live(tmp_path: Path) -> None:
    """A live row's step is written without naming ``final`` (the live index is not rewritten): the row still reads
    its new state, and the dispatch is still among the live ones; its final step takes it out of them."""
    journal, d = _journal_with_a_dispatch(tmp_path)
    journal.record(Record(d.id, _step("hold", "HELD_high_eur", 5.0), "HELD(high-eur)", final=False))
    row = journal.dispatch(d.id)
    assert row is not None
    assert (row.state, row.label, row.final, row.updated_at) == ("HELD_high_eur", "HELD(high-eur)", False, 5.0)
    assert [r.id for r in journal.dispatches(live_only=True)] == [d.id]
    journal.record(Record(d.id, _step("withdraw", "WITHDRAWN", 6.0), "WITHDRAWN", final=True, outcome="withdrawn"))
    assert journal.dispatches(live_only=True) == []
    journal.close()


def test_a_non_final_step_of_a_row_that_was_final_is_written_in_full(tmp_path: Path) -> None:
    """The rare row journaled final that then takes a step that is not (a journal written before RUNNING was
    followed, say) is updated in full: it reads live again, and is listed with the live ones."""
    journal, d = _journal_with_a_dispatch(tmp_path)
    journal.record(Record(d.id, _step("start", "RUNNING", 5.0), "RUNNING", final=True))
    assert journal.dispatches(live_only=True) == []
    journal.record(Record(d.id, _step("requeue", "REQUEUED", 6.0), "REQUEUED", final=False))
    row = journal.dispatch(d.id)
    assert row is not None
    assert (row.state, row.final, row.updated_at) == ("REQUEUED", False, 6.0)
    assert [r.id for r in journal.dispatches(live_only=True)] == [d.id]
    journal.close()
