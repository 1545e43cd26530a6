"""Helpers of the journal's tests: a journal holding one submitted dispatch."""

from __future__ import annotations

from pathlib import Path

from freezegun import freeze_time

from fellows_fsm import Dispatch, FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.journal.store import Journal
from fellows_fsm.testing import Driven

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)


def _journal_with_a_dispatch(tmp_path: Path) -> tuple[Journal, Driven]:
    journal = Journal(tmp_path / "journal.sqlite3")
    with freeze_time("2026-11-30 12:00:00"):
        d = Driven(Dispatch("d1", SPEC, SlurmSettings(park_cap_seconds=60).ladder), FakeScheduler(), journal)
        journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
        d.submit()
    return journal, d
