"""The outbox: an event row only for a step that happened, written in the step's own transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
from freezegun import freeze_time
from prometheus_client.parser import text_string_to_metric_families

from fellows_fsm import Dispatch, FakeScheduler, SlurmSettings
from fellows_fsm.core.effects import Attach, Record, Step
from fellows_fsm.core.events import ENDED, Event, events_of
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.vocab import State, Trigger
from fellows_fsm.errors import JournalError
from fellows_fsm.journal import outbox
from fellows_fsm.journal.outbox import DELIVERED, FAILED, PENDING
from fellows_fsm.journal.snapshot import dispatch_json
from fellows_fsm.journal.store import Journal
from fellows_fsm.notify.envelope import envelope
from fellows_fsm.notify.metrics import text
from fellows_fsm.testing import Driven
from tests.unit.journal.journals import SPEC

DATA = Path(__file__).parents[1] / "journal" / "data"


def _walk(journal: Journal) -> Driven:
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as frozen:
        d = Driven(Dispatch("w1", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
        frozen.tick(60)
        assert d.job_id is not None
        d.advance(fake.observe([d.job_id])[d.job_id])
    return d


def test_a_walk_journals_queued_then_rung_changed_with_where_from_and_why(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    _walk(journal)
    events = journal.events_of("w1")
    assert [e.event for e in events] == ["queued", "rung_changed"]  # park and cancel are not told
    assert (events[0].facts["qos"], events[0].facts["lane"]) == ("high-eur", "fellows")
    changed = events[1].facts
    assert changed["from"] == {"lane": "fellows", "qos": "high-eur"}
    assert changed["to"] == {"lane": "fellows", "qos": "normal-eur"}
    assert changed["why"]  # the park's sentence
    assert len({e.event_id for e in events}) == 2
    journal.close()


def test_an_event_is_rolled_back_with_its_step(tmp_path: Path) -> None:
    """A failed write keeps neither the step nor its event (and a step that wrote is never without its event)."""
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    _walk(journal)
    step = Step(
        at=1.0, source="RUNNING", dest=State.PAID_DONE, trigger=Trigger.PAID_END, rung_index=0, qos="", job_id=None
    )

    def step_then_a_broken_row() -> None:  # a job row that breaks the foreign key, after the step and its event
        with journal.batch():
            journal.write([Record("w1", step, "PAID_DONE", final=True)])
            journal.write([Attach("nope", 0, "1", 0.0)])

    with pytest.raises(JournalError):
        step_then_a_broken_row()
    db = sqlite3.connect(path)
    steps = db.execute("SELECT count(*) FROM transitions WHERE trigger='paid_end'").fetchone()[0]
    events = db.execute("SELECT count(*) FROM outbox WHERE event='ended'").fetchone()[0]
    told = db.execute(
        "SELECT count(*) FROM transitions t WHERE t.trigger IN ('submit','resubmit')"
        " AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.step_seq = t.seq)"
    ).fetchone()[0]
    db.close()
    assert (steps, events, told) == (0, 0, 0)
    journal.close()


def test_the_tables_choose_events_by_trigger_and_end() -> None:
    def step(trigger: str, dest: str) -> Step:
        return Step(at=0.0, source="X", dest=dest, trigger=trigger, rung_index=0, qos="", job_id=None)

    assert events_of(step(Trigger.PARK, State.PARKED), final=False) == ()
    assert events_of(step(Trigger.START, State.RUNNING), final=True) == (Event.STARTED,)
    assert events_of(step(Trigger.PAID_END, State.PAID_DONE), final=True) == (Event.ENDED,)
    assert events_of(step(Trigger.PAID_STUCK, State.PAID_FAILED), final=True) == (Event.ATTENTION, Event.ENDED)
    assert events_of(step(Trigger.HANDOFF_FAILED, State.HANDOFF_FAILED), final=True) == (Event.ATTENTION,)
    assert State.RUNNING not in ENDED


def test_a_sink_is_sent_only_what_was_journaled_after_it_was_named_and_not_yet_delivered(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    journal.mark_sinks(["late"])  # named before anything happened
    _walk(journal)
    journal.mark_sinks(["later", "late"])  # named after: nothing of the past
    assert [e.event for e in journal.unsent("late", ["queued", "rung_changed"])] == ["queued", "rung_changed"]
    assert journal.unsent("later", ["queued", "rung_changed"]) == []
    assert [e.event for e in journal.unsent("late", ["rung_changed"])] == ["rung_changed"]
    first, second = journal.unsent("late", ["queued", "rung_changed"])
    journal.put_delivery(first.seq, "late", status=DELIVERED, at=1.0, next_at=None, answer="200")
    journal.put_delivery(second.seq, "late", status=PENDING, at=1.0, next_at=5.0, answer="500")
    assert [e.seq for e in journal.unsent("late", ["queued", "rung_changed"])] == [second.seq]
    again = journal.put_delivery(second.seq, "late", status=FAILED, at=2.0, next_at=None, answer="404")
    assert (again.attempts, again.first_at, again.last_at) == (2, 1.0, 2.0)
    assert journal.unsent("late", ["queued", "rung_changed"]) == []
    assert [journal.fix_body(first.seq, "a"), journal.fix_body(first.seq, "b")] == ["a", "a"]  # kept once
    journal.close()


def test_a_dispatch_pinned_to_a_lane_is_queued_on_that_lane(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    journal.add_lane_dispatch("p1", SPEC, intent="prod", lane="gcp", at=5.0)
    [queued] = journal.events_of("p1")
    assert (queued.event, queued.facts["lane"], queued.at) == ("queued", "gcp", 5.0)
    journal.close()


def test_a_journal_of_an_older_schema_read_only_has_no_events_and_a_driver_upgrades_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path)
    db.executescript((DATA / "journal_3666b49.sql").read_text(encoding="utf-8"))  # schema 3: no outbox
    db.close()
    reader = Journal(path, readonly=True)
    assert (reader.recent_deliveries(), reader.delivery_counts(), reader.unsent("x", ["queued"])) == ([], {}, [])
    reader.close()
    writer = Journal(path)  # the driver's open: every migration applied, the outbox among them
    assert writer.has_outbox()
    writer.close()


def test_a_free_jobs_end_is_told_ended_with_its_result_word_and_exit_code(tmp_path: Path) -> None:
    """A job that ran on a free rung and exited 3 is told ``started``, then ``ended`` with ``failed`` and exit code 3
    (the ends row its end step wrote in the same transaction), not a state name."""
    journal = Journal(tmp_path / "j.sqlite3")
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as frozen:
        d = Driven(Dispatch("w2", SPEC, SlurmSettings(park_cap_seconds=600).ladder), fake, journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
        assert d.job_id is not None
        fake.start(d.job_id)
        frozen.tick(5)
        d.advance(fake.observe([d.job_id])[d.job_id])
        fake.end(d.job_id, "FAILED", exit_code=3)
        frozen.tick(5)
        d.advance(fake.observe([d.job_id])[d.job_id])
    assert d.state == State.ENDED
    events = journal.events_of("w2")
    assert [e.event for e in events] == ["queued", "started", "ended"]
    ended = events[-1].facts
    assert (ended["result"], ended["exit_code"]) == ("failed", 3)
    # the envelope's dispatch object is the one ``status --json`` gives: its result and exit code with it
    told = envelope(journal, events[-1])["dispatch"]
    assert (told["result"], told["exit_code"], told["final"]) == ("failed", 3, True)
    assert told == dispatch_json(journal.dispatch("w2"), None, now=events[-1].at, end=journal.ends(["w2"])["w2"])
    # and its GPU-hours are the free lane's metric (sacct's Elapsed x its GPUs, as journaled with its end)
    families = {f.name: f for f in text_string_to_metric_families(text(journal, None))}
    [sample] = families["fellows_free_gpu_hours"].samples
    end = journal.ends(["w2"])["w2"]
    assert sample.labels == {"cluster": "fellows"}
    assert sample.value == pytest.approx(end.gpus * (end.elapsed_seconds or 0) / 3600)
    assert sample.value > 0
    journal.close()


def test_a_rung_change_to_another_cluster_names_both_lanes_and_the_last_parks_reason(tmp_path: Path) -> None:
    """The facts of a rung change read the step before it (the rung left, whatever step that was), the last park's
    reason (two steps back here), and each rung's lane from the dispatch's journaled ladder."""
    ladder = Ladder((Rung(0, "high-eur", 60.0), Rung(1, "normal-eur", 60.0), Rung(2, "inst-high", 60.0, lane="inst")))
    journal = Journal(tmp_path / "j.sqlite3")
    journal.add_dispatch("x1", SPEC, ladder, pinned=False, intent="prod", at=0.0)

    def step(trigger: str, source: str, dest: str, rung: int, qos: str, **more: str) -> Record:
        return Record("x1", Step(1.0, source, dest, trigger, rung, qos, "7", **more), dest, final=False)

    journal.write([step("park", "RESUBMITTED_normal_eur", "PARKED", 1, "normal-eur", reason="QOSMaxGRESPerUser")])
    journal.write([step("park", "RESUBMITTED_normal_eur", "PARKED", 1, "normal-eur", note="not this one: older")])
    journal.write([step("park", "RESUBMITTED_normal_eur", "PARKED", 1, "normal-eur", reason="Priority")])
    journal.write(
        [
            step("recall", "PARKED", "CANCELLED", 1, "normal-eur"),
            step("resubmit", "CANCELLED", "RESUBMITTED_inst__inst_high", 2, "inst-high"),
        ]
    )
    [changed] = journal.events_of("x1")
    assert changed.event == "rung_changed"
    assert changed.facts["from"] == {"lane": "fellows", "qos": "normal-eur"}
    assert changed.facts["to"] == {"lane": "inst", "qos": "inst-high"}
    assert changed.facts["why"] == "Priority"
    journal.close()


def test_a_rung_changes_facts_from_the_dispatchs_history_are_what_its_rows_give(tmp_path: Path) -> None:
    """A rung change's Record carries where it came from and why (``Record.walk``, from the dispatch's history: the
    outbox reads nothing back for it); its event's facts are exactly those the rows give (``_facts`` without the
    walk, as for a Record built elsewhere), across a park for SLURM's reason and a driver restarted in between."""
    journal = Journal(tmp_path / "j.sqlite3")
    written: list[Record] = []
    write = journal.write

    def keep(effects: Sequence[Record | Attach]) -> None:
        written.extend(e for e in effects if isinstance(e, Record))
        write(effects)

    journal.write = keep  # type: ignore[method-assign]
    fake = FakeScheduler()
    ladder = SlurmSettings(park_cap_seconds=60).ladder
    with freeze_time("2026-11-30 12:00:00") as frozen:
        d = Driven(Dispatch("w2", SPEC, ladder), fake, journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
        frozen.tick(60)
        d.advance(fake.observe([d.job_id])[d.job_id])  # window closed: onto normal-eur
        assert d.rung_index == 1
        fake.set_pending(d.job_id, "Priority")
        restored = Dispatch.restore(
            "w2", SPEC, ladder, history=journal.steps("w2"), jobs={r.rung_index: r.job_id for r in journal.jobs("w2")}
        )  # a new driver: the history replayed from the journal
        d = Driven(restored, fake, journal)
        frozen.tick(60)
        d.advance(fake.observe([d.job_id])[d.job_id])  # parked for Priority: onto low-eur
        assert d.rung_index == 2
    changes = [r for r in written if r.step.trigger == Trigger.RESUBMIT]
    assert len(changes) == 2
    assert all(r.walk is not None for r in changes)
    events = [e for e in journal.events_of("w2") if e.event == "rung_changed"]
    assert [e.facts["why"] for e in events] == ["no start on high-eur within its window", "Priority"]
    db = journal._db
    for event, record in zip(events, changes, strict=True):
        step_seq = db.execute("SELECT step_seq FROM outbox WHERE seq=?", (event.seq,)).fetchone()[0]
        read_back = outbox._facts(db, attrs.evolve(record, walk=None), step_seq, Event.RUNG_CHANGED)
        assert event.facts == read_back
    journal.close()
