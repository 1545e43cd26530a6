"""The journal's ends table: a free job's end written in the transaction of its end step, read back by the views,
``wait`` and ``spend`` (journal/ends.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from freezegun import freeze_time

from fellows_fsm import Dispatch, FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.core.vocab import Result, State
from fellows_fsm.journal.store import Journal
from fellows_fsm.testing import Driven


def _running(journal: Journal, fake: FakeScheduler, name: str, gpus: int) -> Driven:
    """A journaled dispatch whose job runs."""
    d = Driven(
        Dispatch(name, JobSpec(name, "job.sbatch", gpus=gpus), SlurmSettings(park_cap_seconds=60).ladder), fake, journal
    )
    journal.add_dispatch(d.id, d.spec, d.ladder, pinned=False, intent="prod", at=0.0)
    d.submit()
    assert d.job_id is not None
    fake.start(d.job_id)
    d.advance(fake.observe([d.job_id])[d.job_id])
    return d


def test_an_end_step_writes_its_row_and_free_sums_count_it(tmp_path: Path) -> None:
    """The end step writes the dispatch ENDED (final, its result as outcome) and its ends row together; free_sums
    adds each lane's GPU-hours of the jobs that ended since a time."""
    journal = Journal(tmp_path / "journal.sqlite3")
    fake = FakeScheduler()
    with freeze_time("2026-12-01 12:00:00") as clock:
        one = _running(journal, fake, "a1", 8)
        two = _running(journal, fake, "a2", 2)
        clock.tick(1800)
        assert one.job_id is not None
        assert two.job_id is not None
        fake.end(one.job_id)
        fake.end(two.job_id, "FAILED", exit_code=3)
        for d in (one, two):
            d.advance(fake.observe([d.job_id])[d.job_id])  # type: ignore[index]
    row = journal.dispatch("a1")
    assert row is not None
    assert (row.state, row.final, row.outcome) == (State.ENDED, True, Result.SUCCEEDED)
    ends = journal.ends(["a1", "a2", "nope"])
    assert sorted(ends) == ["a1", "a2"]
    assert (ends["a2"].result, ends["a2"].exit_code, ends["a2"].slurm_state) == (Result.FAILED, 3, "FAILED")
    assert ends["a1"].gpu_hours == pytest.approx(4.0)
    [(lane, jobs, hours)] = journal.free_sums(0.0)
    assert (lane, jobs) == ("fellows", 2)
    assert hours == pytest.approx(4.0 + 1.0)
    assert journal.free_sums(ends["a1"].ended_at + 1) == []
    journal.close()
