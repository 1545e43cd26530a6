"""Issue 29's recovery cases in the core and the journal's front door: a held job our own --deadline dropped goes
on with the rest of its window (case 6); every job with the token (case 3). One journal, one cluster (case 12) is
driver/test_process.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import State
from fellows_fsm.driver.router import Router
from fellows_fsm.driver.strays import dispatch_of
from fellows_fsm.journal.store import Journal
from tests.unit.conftest import CAP, DispatchFactory, poll

NORMAL = "RESUBMITTED_normal_eur"


def test_a_held_job_dropped_at_our_own_deadline_goes_on_with_the_rest_of_its_window(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With controller_deadline, a held job SLURM drops (DEADLINE) is the rung's own end: never withdrawn, the next
    rung is submitted, and its window is its own cap plus what the hold left of the first one."""
    spec = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=60)
    d = make_dispatch(spec=spec, controller_deadline=True)
    d.submit()
    assert d.job_id is not None
    first = d.job_id
    frozen.tick(CAP / 2)
    fake.set_pending(first, "JobHeldUser")
    poll(d, fake)
    assert d.held
    frozen.tick(10 * CAP)
    fake.end(first, "DEADLINE")
    poll(d, fake)
    assert [s.trigger for s in d.history] == ["submit", "hold", "drop", "resubmit"]
    assert d.state == NORMAL
    assert d.job_id not in (None, first)
    assert d.deadline == d.history[-1].at + CAP + CAP / 2


def test_a_held_job_cancelled_by_someone_is_still_withdrawn(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With controller_deadline on, a held job someone scancels (CANCELLED, not DEADLINE) is still their decision:
    WITHDRAWN, never resubmitted."""
    spec = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=60)
    d = make_dispatch(spec=spec, controller_deadline=True)
    d.submit()
    assert d.job_id is not None
    fake.set_pending(d.job_id, "JobHeldUser")
    poll(d, fake)
    frozen.tick(2 * CAP)
    fake.end(d.job_id, "CANCELLED")
    poll(d, fake)
    assert d.state == State.WITHDRAWN
    assert len(fake.jobs) == 1


SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)
CAPPED = {"high-eur": 16, "normal-eur": 16}


def _router(tmp_path: Path, fake: FakeScheduler) -> Router:
    config = Config(fellows=SlurmSettings(park_cap_seconds=CAP), state_dir=tmp_path)
    return Router(config, fake, Journal(config.journal_path)).start()


def test_a_restarted_router_cancels_a_pending_job_carrying_a_dispatchs_token_that_is_not_its_job(
    tmp_path: Path, frozen: FrozenDateTimeFactory
) -> None:
    """After a restart, the first answered tick looks up every job with a live dispatch's token (one call): a
    pending one the journal does not have (a lost submit's, on any rung) is cancelled; its own job is kept."""
    fake = FakeScheduler(qos_gpu_caps=CAPPED, total_gpus=64)
    for _ in range(2):
        fake.add_job(SPEC, qos="high-eur", token="blocker")
    fake.schedule()
    r = _router(tmp_path, fake)
    h = r.dispatch(SPEC)
    own = h.slurm_job_id
    assert own is not None
    strays = [
        fake.add_job(SPEC, qos=q, token=f"fsm-{h.dispatch_id}-r{k}") for k, q in ((0, "high-eur"), (1, "normal-eur"))
    ]
    r.journal.close()
    again = _router(tmp_path, fake)
    try:
        again.poll()
        assert [j.state for j in strays] == ["CANCELLED", "CANCELLED"]
        assert fake.jobs[own].state == "PENDING"
        assert fake.calls["find_tokens"] == 1
    finally:
        again.journal.close()


def test_cancel_reaches_every_job_with_the_dispatchs_token_even_once_it_runs(
    tmp_path: Path, frozen: FrozenDateTimeFactory
) -> None:
    """`cancel` of a dispatch that RUNS scancels its job and any other job carrying its token (a stray on an
    earlier rung), not only the jobs the journal has."""
    fake = FakeScheduler(total_gpus=64)
    r = _router(tmp_path, fake)
    try:
        h = r.dispatch(SPEC)
        fake.schedule()
        r.poll()
        assert r.handle(h.dispatch_id).state == "RUNNING"
        stray = fake.add_job(SPEC, qos="low-eur", token=f"fsm-{h.dispatch_id}-r2")
        fake.set_pending(stray.job_id, "Priority")
        assert sorted(r.withdraw(h.dispatch_id)) == sorted([h.slurm_job_id, stray.job_id])
        assert stray.state == "CANCELLED"
    finally:
        r.journal.close()


@pytest.mark.parametrize(
    ("token", "dispatch"),
    [("fsm-0123abcd4567-r2", "0123abcd4567"), ("blocker", None), (None, None), ("fsm-x", None)],
    ids=["token", "other-comment", "none", "no-rung"],
)
def test_dispatch_of_reads_the_dispatch_a_token_names(token: str | None, dispatch: str | None) -> None:
    """A token names its dispatch; any other comment names none."""
    assert dispatch_of(token) == dispatch
