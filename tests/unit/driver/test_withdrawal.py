# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""Withdrawal on the fake port: a Ctrl-C while a first job is queued, and the late job it may leave behind."""

from __future__ import annotations

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, Interrupted, JobSpec
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.effects import Record
from fellows_fsm.core.vocab import Trigger

from .fixtures import CAP, SPEC, MakeRouter, fake, frozen, make_router  # noqa: F401


def test_a_late_job_of_an_interrupted_submit_is_cancelled_by_the_next_router(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job that a stalled controller created after Ctrl-C withdrew its dispatch is cancelled when the next
    router starts; one withdrawn more than an hour ago is left alone."""
    r = make_router()
    recent, old = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
    for dispatch_id in (old, recent):
        d = Dispatch(dispatch_id, SPEC, r.config.fellows.ladder)  # Ctrl-C before its first submit answered
        r.journal.add_dispatch(d.id, SPEC, d.ladder, pinned=False, intent="prod", at=r.clock.now())
        interrupted = d.recall([], r.clock.now(), trigger=Trigger.INTERRUPT)
        r.journal.write([e for e in interrupted.effects if isinstance(e, Record)])
        assert r.journal.dispatch(d.id).outcome == "withdrawn-interrupted"  # type: ignore[union-attr]
        frozen.tick(3601 if dispatch_id == old else 0)
    late = fake.add_job(SPEC, qos="high-eur", token=f"fsm-{recent}-r0")
    stale = fake.add_job(SPEC, qos="high-eur", token=f"fsm-{old}-r0")
    r.journal.close()
    make_router()
    assert (late.state, stale.state) == ("CANCELLED", "PENDING")


class CtrlCAfterSbatch(FakeScheduler):
    """The fake cluster whose first sbatch queues the job, then the user's Ctrl-C lands before its answer."""

    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        job_id = super().submit(spec, qos=qos, token=token, deadline=deadline)
        if self.calls["submit"] == 1:
            raise KeyboardInterrupt
        return job_id


def test_ctrl_c_during_the_first_sbatch_withdraws_the_dispatch_and_cancels_the_job_it_made(
    make_router: MakeRouter, frozen: FrozenDateTimeFactory
) -> None:
    """Ctrl-C while a dispatch's first job is queued ends in one state: Interrupted (exit 130, also a
    KeyboardInterrupt), the dispatch journaled withdrawn-interrupted, the job it made found by token and cancelled,
    and the router drives nothing."""
    fake = CtrlCAfterSbatch(total_gpus=64)
    r = make_router(scheduler=fake)
    with pytest.raises(Interrupted) as raised:
        r.dispatch(SPEC)
    assert raised.value.exit_code == 130
    assert isinstance(raised.value, KeyboardInterrupt)
    [row] = r.journal.dispatches()
    assert (row.final, row.outcome) == (True, "withdrawn-interrupted")
    [job] = fake.jobs.values()
    assert job.state == "CANCELLED"
    assert f"dispatch {row.id} withdrawn (its job {job.job_id} cancelled)" in str(raised.value)
    assert not r.busy
