# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""A tick's rung changes are journaled a group to a transaction (driver/executor.py: ``STEPS_PER_COMMIT``), each
group committed before any of its sbatch calls; a driver that dies between the commit and the calls loses nothing
and duplicates nothing."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec
from fellows_fsm.driver.executor import STEPS_PER_COMMIT

from .fixtures import CAP, PRIORITY, SPEC, MakeRouter, frozen, make_router  # noqa: F401


class Died(BaseException):
    """The driver process dies here (nothing after it runs: no handler catches a BaseException of ours)."""


class Watching(FakeScheduler):
    """The fake port, which reads the journal's COMMITTED rows (its own connection) at each submit, and can die."""

    def __init__(self, journal: Path) -> None:
        super().__init__(qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16, "normal-eur": 16}, total_gpus=0)
        self.journal = journal
        self.seen: list[tuple[str, str, str]] = []
        """(token, the qos submitted, the dispatch's last committed step's trigger and qos) at each submit."""
        self.die_at: int | None = None
        self.die = lambda: None
        """What else dies with the process (its journal writes)."""

    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        if self.die_at is not None and self.calls["submit"] + 1 == self.die_at:
            self.die()
            raise Died
        db = sqlite3.connect(self.journal)
        try:
            last = db.execute(
                "SELECT t.trigger, t.qos FROM transitions t JOIN dispatches d ON d.id = t.dispatch_id"
                " WHERE ? LIKE '%' || d.id || '%' ORDER BY t.seq DESC LIMIT 1",
                (token,),
            ).fetchone()
        finally:
            db.close()
        self.seen.append((token, qos, f"{last[0]} {last[1]}" if last else "nothing committed"))
        return super().submit(spec, qos=qos, token=token, deadline=deadline)


@pytest.fixture
def watching(tmp_path: Path, frozen: FrozenDateTimeFactory) -> Watching:
    return Watching(tmp_path / "journal.sqlite3")


def test_a_ticks_rung_changes_are_committed_in_groups_before_their_submits(
    make_router: MakeRouter, watching: Watching, frozen: FrozenDateTimeFactory
) -> None:
    """50 windows closing at once: 50 rung changes in 3 commits (not 50), every resubmit step (and its event)
    committed before its own sbatch, one rung_changed event each."""
    r = make_router(scheduler=watching, max_rung_changes_per_tick=50)
    assert r.journal.path == watching.journal
    ids = [r.dispatch(SPEC).dispatch_id for _ in range(50)]
    watching.seen.clear()
    commits: list[str] = []
    r.journal._db.set_trace_callback(lambda sql: commits.append(sql) if sql.startswith("COMMIT") else None)
    frozen.tick(CAP)
    report = r.poll()
    r.journal._db.set_trace_callback(None)
    assert report.rung_changes == 50
    assert [(qos, last) for _, qos, last in watching.seen] == [("normal-eur", "resubmit normal-eur")] * 50
    groups = -(-50 // STEPS_PER_COMMIT)
    # the parks (one transaction), the rung changes (one per group), the tick's job ids (one)
    assert len(commits) == 1 + groups + 1
    events = Counter(e.event for d in ids for e in r.journal.events_of(d))
    assert events == {"queued": 50, "rung_changed": 50}


def test_a_driver_killed_between_a_groups_commit_and_its_submits_loses_and_duplicates_nothing(
    make_router: MakeRouter, watching: Watching, frozen: FrozenDateTimeFactory
) -> None:
    """The driver dies at the 5th sbatch of a group of 20 committed rung changes: the next driver finds the 4 jobs
    by their tokens (their ids were never journaled) and submits the 16 others once each; one live job per dispatch,
    one rung_changed event per change."""
    r1 = make_router(scheduler=watching, max_rung_changes_per_tick=STEPS_PER_COMMIT)
    ids = [r1.dispatch(SPEC).dispatch_id for _ in range(STEPS_PER_COMMIT)]
    first = watching.calls["submit"]
    watching.die_at = first + 5

    def dead(*_: object) -> None:
        raise Died

    watching.die = lambda: setattr(r1.journal, "write", dead)  # nothing more of the process is written
    frozen.tick(CAP)
    with pytest.raises(Died):
        r1.poll()
    assert watching.calls["submit"] == first + 4
    steps = {d: [s.trigger for s in r1.journal.steps(d)] for d in ids}
    assert all(s[-1] == "resubmit" for s in steps.values()), steps  # all 20 committed before the first sbatch
    r1.journal._owner = None  # no clean stop: the kernel lets go of its lock
    r1.journal.close()
    watching.die_at = None
    r2 = make_router(scheduler=watching)
    frozen.tick(1)
    r2.poll()
    assert watching.calls["submit"] == first + 4 + 16
    assert watching.calls["find_by_token"] >= 16
    live = Counter(j.token for j in watching.jobs.values() if j.state == "PENDING")
    assert len(live) == STEPS_PER_COMMIT
    assert set(live.values()) == {1}
    for d in ids:
        handle = r2.handle(d)
        assert (handle.qos, handle.slurm_job_id is not None) == ("normal-eur", True), handle
        assert [e.event for e in r2.journal.events_of(d)] == ["queued", "rung_changed"]
