"""A journal written by the code before a lane-pinned dispatch's steps were rows (3666b49: its states set by SQL, no
steps) loads and reads the same, and a driver takes its live one on through the rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.core.effects import Command
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.vocab import HandoffStatus, State, Trigger
from fellows_fsm.driver.executor import Executor
from fellows_fsm.errors import TransitionNotAllowed
from fellows_fsm.journal.history import history_entries
from fellows_fsm.journal.snapshot import Snapshot, dispatch_json
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.ui.snapshot import status_words

DATA = Path(__file__).parent / "data"
READ_THEN = json.loads((DATA / "journal_3666b49_readings.json").read_text(encoding="utf-8"))
"""What 3666b49's own views read of that journal (journal_3666b49_gen.txt made both)."""


@pytest.fixture
def old_journal(tmp_path: Path) -> Journal:
    """The journal 3666b49 wrote: pinned to gcp, handed off, mid-command, failed, and withdrawn before it ran."""
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path)
    db.executescript((DATA / "journal_3666b49.sql").read_text(encoding="utf-8"))
    db.close()
    journal = Journal(path)
    yield journal
    journal.close()


def _reading(journal: Journal, dispatch_id: str) -> dict[str, Any]:
    row = journal.dispatch(dispatch_id)
    assert row is not None
    handoff = journal.handoff(dispatch_id)
    status = dispatch_json(row, handoff)
    entries = history_entries(row, journal.steps(dispatch_id), journal.jobs(dispatch_id), handoff)
    keys = ("state", "lane", "qos", "slurm_job_id", "final", "outcome", "handoff_exit_status")
    return {
        "status": {key: status[key] for key in keys},
        "words": status_words(Snapshot.of_row(row, handoff)),
        "live": not row.final,
        "history": [e.as_json() | {"source_name": e.source_name, "dest_name": e.dest_name} for e in entries],
    }


def test_an_old_journal_of_pinned_dispatches_reads_as_it_did(old_journal: Journal) -> None:
    """status (state, lane, outcome, the state column's words) and history of each old row are what 3666b49 read."""
    assert sorted(READ_THEN) == [r.id for r in old_journal.dispatches()]
    for dispatch_id, then in READ_THEN.items():
        assert _reading(old_journal, dispatch_id) == then, dispatch_id
    assert [r.id for r in old_journal.dispatches(live_only=True)] == ["bbbb00000002"]


def test_an_old_pinned_dispatch_mid_command_is_taken_on_through_the_rows(old_journal: Journal) -> None:
    """The old HANDING_OFF row (no steps) restores to HANDING_OFF; its command's end is then the handed_off row, which
    sets the dispatch's state and the command's in one step, and a cancel of it is refused (its command ran)."""
    row = old_journal.dispatch("bbbb00000002")
    assert row is not None
    d = LaneDispatch.restore(row.id, row.lane, state=row.state, history=old_journal.steps(row.id))
    assert (d.state, d.history) == (State.HANDING_OFF, [])
    executor = Executor(FakeScheduler(), old_journal, SimClock(1_700_000_100.0))
    ended = Command(HandoffStatus.DONE, exit_status=0, stdout="job created\n")
    executor.command_step(d, Trigger.HANDED_OFF, "gcp command exited 0", ended)
    after, handoff = old_journal.dispatch(row.id), old_journal.handoff(row.id)
    assert after is not None
    assert handoff is not None
    assert (after.state, after.final, after.outcome) == (State.HANDED_OFF, True, "handed-off")
    assert (handoff.status, handoff.exit_status, handoff.pid) == ("done", 0, 4343)
    assert [s.trigger for s in old_journal.steps(row.id)] == ["handed_off"]
    with pytest.raises(TransitionNotAllowed):
        d.recall([], 1_700_000_200.0)


def test_an_old_withdrawn_pinned_dispatch_stays_withdrawn_and_final(old_journal: Journal) -> None:
    """The old row withdrawn by SQL restores to WITHDRAWN, final, with no step of its own."""
    row = old_journal.dispatch("dddd00000004")
    assert row is not None
    d = LaneDispatch.restore(row.id, row.lane, state=row.state, history=old_journal.steps(row.id))
    assert (d.state, d.is_final, old_journal.steps(row.id)) == (State.WITHDRAWN, True, [])
