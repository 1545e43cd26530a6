"""The lifecycle machine on the fake port, every timeout driven by freezegun."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import (
    CANCELLED,
    FAILED_TO_GCP,
    PARKED,
    RUNNING,
    Dispatch,
    FakeScheduler,
    JobSpec,
    QosRejected,
    SlurmSettings,
    Step,
    SubmitRejected,
    TransitionNotAllowed,
)
from fellows_fsm.core.effects import Attach, Record
from fellows_fsm.core.lifecycle import TRIGGERS
from fellows_fsm.core.machine import build_machine
from fellows_fsm.driver.executor import NullRecorder
from tests.unit.conftest import CAP, DispatchFactory, Driven, poll

HIGH, NORMAL, LOW = "SUBMITTED_high_eur", "RESUBMITTED_normal_eur", "RESUBMITTED_low_eur"
RUNGS = (HIGH, NORMAL, LOW)


SubmitFactory = Callable[..., Driven]


@pytest.fixture
def submitted(make_dispatch: DispatchFactory) -> SubmitFactory:
    """Build and submit a dispatch (keyword arguments as ``make_dispatch`` takes them): it waits on its first rung,
    with its job."""

    def submit(**kwargs: object) -> Driven:
        d = make_dispatch(**kwargs)
        d.submit()
        assert d.job_id is not None
        return d

    return submit


def walk_to_rung(d: Dispatch, fake: FakeScheduler, frozen: FrozenDateTimeFactory, index: int) -> None:
    """Submit ``d`` and let each rung before ``index`` park out exactly at its deadline."""
    d.submit()
    for _ in range(index):
        frozen.tick(d.deadline - fake.clock.now())
        poll(d, fake)
    assert d.state == RUNGS[index]


def states_of(d: Dispatch) -> list[str]:
    """The states a dispatch entered, in order."""
    return [s.dest for s in d.history]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["high-eur", "normal-eur", "low-eur"])
def test_each_rung_parks_exactly_at_its_cap(
    reached: ReachFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory, index: int
) -> None:
    """A job pending on any rung is still there at cap - 1 s and parked out at exactly cap."""
    d = reached(RUNGS[index])
    entered = fake.clock.now()
    frozen.tick(CAP - 1)
    poll(d, fake)
    assert d.state == RUNGS[index]
    assert fake.clock.now() - entered == CAP - 1
    frozen.tick(1)
    poll(d, fake)
    assert PARKED in states_of(d)[-3:]
    parked = [s for s in d.history if s.dest == PARKED][-1]
    assert parked.at - entered == CAP
    assert parked.qos == d.ladder.rungs[index].qos


def test_full_walk_high_normal_low_then_gcp(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job that never starts walks high-eur, normal-eur, low-eur in order, then FAILED_TO_GCP."""
    d = submitted()
    submitted_at = fake.clock.now()
    for _ in range(3 * int(CAP) + 5):
        frozen.tick(1)
        poll(d, fake)
        if d.is_final:
            break
    assert d.state == FAILED_TO_GCP
    assert states_of(d) == [
        HIGH, PARKED, CANCELLED, NORMAL, PARKED, CANCELLED, LOW, PARKED, CANCELLED, FAILED_TO_GCP,
    ]  # fmt: skip
    assert [j.qos for j in fake.jobs.values()] == ["high-eur", "normal-eur", "low-eur"]
    assert all(j.state == "CANCELLED" and j.start_time is None for j in fake.jobs.values())
    assert d.history[-1].at - submitted_at == d.ladder.worst_case_seconds


@pytest.mark.parametrize("index", [0, 1, 2], ids=["high-eur", "normal-eur", "low-eur"])
def test_running_from_every_rung(
    reached: ReachFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory, index: int
) -> None:
    """A job seen running on any rung makes the dispatch RUNNING (the walk's goal, followed: not final), with no
    further submission however long it runs."""
    d = reached(RUNGS[index])
    assert d.job_id is not None
    fake.start(d.job_id)
    frozen.tick(5)
    poll(d, fake)
    assert d.state == RUNNING
    assert not d.is_final
    frozen.tick(10 * CAP)
    poll(d, fake)
    assert d.state == RUNNING
    assert len(fake.jobs) == index + 1


def test_late_start_during_cancel_wins(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job that starts between the park decision and the cancel landing ends RUNNING, never resubmitted.

    The cancel cannot prove it gone, so the dispatch waits in PARKED for the next tick's look, which reads it
    running (as the router does: one batched cancel per tick, read back by the next observe).
    """
    d = submitted()
    fake.jobs[d.job_id].start_on_cancel = True
    frozen.tick(CAP)
    poll(d, fake)
    assert states_of(d) == [HIGH, PARKED]
    frozen.tick(1)
    poll(d, fake)
    assert states_of(d) == [HIGH, PARKED, RUNNING]
    assert len(fake.jobs) == 1
    assert fake.jobs[d.job_id].state == "RUNNING"


def test_late_start_seen_while_parked_wins(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A parked dispatch whose cancel was deferred starts RUNNING if its job starts meanwhile."""
    d = submitted()
    frozen.tick(CAP)
    poll(d, fake, may_change_rung=False)
    assert d.state == PARKED
    assert fake.calls["cancel_if_pending"] == 0
    assert d.job_id is not None
    fake.start(d.job_id)
    poll(d, fake)
    assert d.state == RUNNING
    assert len(fake.jobs) == 1


def test_pinned_dispatch_never_walks(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A pinned dispatch keeps its live PENDING job on high-eur however long it waits."""
    d = submitted(pinned=True)
    for _ in range(10):
        frozen.tick(CAP)
        poll(d, fake)
    assert d.state == HIGH
    assert len(fake.jobs) == 1
    assert d.job_id is not None
    assert fake.jobs[d.job_id].state == "PENDING"
    assert fake.calls["cancel_if_pending"] == 0
    with pytest.raises(TransitionNotAllowed, match="walks_ladder"):
        d.park()


def test_pinned_dispatch_whose_job_vanishes_ends_without_walking(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A pinned dispatch whose job ends unstarted (its deadline) stops in CANCELLED and never goes to another rung."""
    d = submitted(pinned=True)
    fake.end(d.job_id, "DEADLINE")
    poll(d, fake)
    assert d.state == CANCELLED
    assert d.is_final
    poll(d, fake)
    assert len(fake.jobs) == 1


def test_never_fits_reason_parks_before_the_cap(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A pending reason proving the rung can never start the job parks it at once, not after the cap."""
    d = submitted()
    fake.set_pending(d.job_id, "QOSMaxWallDurationPerJobLimit")
    frozen.tick(3)
    poll(d, fake)
    assert d.state == NORMAL
    assert [s.trigger for s in d.history] == ["submit", "park", "cancel", "resubmit"]
    assert d.history[1].reason == "QOSMaxWallDurationPerJobLimit"


@pytest.mark.parametrize("reason", ["QOSMaxGRESPerUser", "Resources", "Priority", None, "JobHeldUser"])
def test_waiting_reasons_do_not_park_early(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory, reason: str | None
) -> None:
    """Reasons that can clear (own cap, contention, not evaluated, held) keep the job until the cap."""
    d = submitted()
    fake.set_pending(d.job_id, reason)
    frozen.tick(CAP - 1)
    poll(d, fake)
    assert d.state == HIGH


def test_deferred_rung_window_closes_on_schedule(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A late poll eats into the next rung's window instead of delaying GCP past the worst case."""
    d = submitted()
    t0 = fake.clock.now()
    frozen.tick(CAP + 7)  # the poll after high-eur's deadline comes 7 s late
    poll(d, fake)
    assert d.state == NORMAL
    assert d.deadline == t0 + 2 * CAP
    frozen.tick(CAP - 7)
    poll(d, fake)
    assert d.state == LOW
    frozen.tick(CAP)
    poll(d, fake)
    assert d.state == FAILED_TO_GCP
    assert d.history[-1].at - t0 == d.ladder.worst_case_seconds


def test_unconfirmed_cancel_stays_parked_with_one_job(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """While the cancel cannot be confirmed (the controller is down) the dispatch stays PARKED, one job."""
    d = submitted()
    frozen.tick(CAP)
    poll(d, fake, may_change_rung=False)
    fake.unreachable = True
    d.advance(None)  # the cancel call fails: logged, retried next tick
    assert d.state == PARKED
    fake.unreachable = False
    assert d.job_id is not None
    fake.forget(d.job_id)  # squeue and sacct both lose it: not proof that it is gone
    poll(d, fake)
    assert d.state == PARKED
    assert len(fake.jobs) == 1


def test_unknown_job_is_no_reason_to_decide_before_the_cap(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job the scheduler cannot place (UNKNOWN) is never read as finished or gone."""
    d = submitted()
    fake.forget(d.job_id)
    frozen.tick(CAP - 1)
    poll(d, fake)
    assert d.state == HIGH
    assert [s.trigger for s in d.history] == ["submit"]


def test_job_ending_unstarted_moves_to_the_next_rung(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A rung job that ends without starting (e.g. the controller's DEADLINE) goes on to the next rung."""
    d = submitted()
    fake.end(d.job_id, "DEADLINE")
    frozen.tick(1)
    poll(d, fake)
    assert states_of(d) == [HIGH, CANCELLED, NORMAL]


def test_controller_deadline_is_rung_window_plus_time_limit(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With controller_deadline, each rung's job asks SLURM to drop it at window end + time limit."""
    spec = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=60)
    d = submitted(spec=spec, controller_deadline=True)
    assert fake.jobs[d.job_id].deadline == d.deadline + 60
    frozen.tick(CAP + 60)
    fake.schedule()
    assert fake.jobs[d.job_id].state == "DEADLINE"
    poll(d, fake)
    assert [s.trigger for s in d.history] == ["submit", "drop", "resubmit"]
    assert d.state == NORMAL


def test_refused_qos_is_skipped_without_waiting(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A rung whose QoS the cluster refuses at submit is skipped at once, with the refusal noted."""
    d = make_dispatch()
    fake.fail_next_submit(QosRejected("high-eur", "Invalid qos specification"))
    d.submit()
    assert d.state == CANCELLED
    poll(d, fake)
    assert d.state == NORMAL
    assert "Invalid qos specification" in d.history[1].note
    assert [j.qos for j in fake.jobs.values()] == ["normal-eur"]


def test_failed_submit_is_retried_after_a_token_lookup(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A submit whose reply was lost is found again by its token on the next tick, never duplicated."""
    d = make_dispatch()
    real_submit = fake.submit

    def lost_reply(spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        real_submit(spec, qos=qos, token=token, deadline=deadline)
        raise TimeoutError("sbatch timed out after the job was queued")

    fake.submit = lost_reply  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        d.submit()
    fake.submit = real_submit  # type: ignore[method-assign]
    assert d.job_id is None
    poll(d, fake)
    assert d.job_id is not None
    assert len(fake.jobs) == 1
    assert fake.calls["find_by_token"] == 1


def test_recorder_failure_aborts_the_transition(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A journal write that fails stops the tick before the port call it announces; the journal still says HIGH."""

    class FailingRecorder(NullRecorder):
        fail = False
        steps: ClassVar[list[Step]] = []
        jobs: ClassVar[dict[int, str]] = {}

        def write(self, effects: Sequence[Record | Attach]) -> None:
            if self.fail:
                raise OSError("disk full")
            for effect in effects:
                if isinstance(effect, Record):
                    self.steps.append(effect.step)
                else:
                    self.jobs[effect.rung_index] = effect.job_id

    recorder = FailingRecorder()
    d = submitted(recorder=recorder)
    frozen.tick(CAP)
    recorder.fail = True
    with pytest.raises(OSError, match="disk full"):
        poll(d, fake)
    assert fake.calls["cancel_if_pending"] == 0
    restored = Driven(Dispatch.restore(d.id, d.spec, d.ladder, history=recorder.steps, jobs=recorder.jobs), fake)
    assert restored.state == HIGH  # what a restarted router resumes from
    recorder.fail = False
    poll(restored, fake)
    assert restored.state == NORMAL
    assert len(fake.jobs) == 2


def test_submit_is_allowed_once(submitted: SubmitFactory, fake: FakeScheduler) -> None:
    """Submitting a dispatch twice raises the package's error and queues nothing more."""
    d = submitted()
    with pytest.raises(TransitionNotAllowed, match=rf"dispatch {d.id}: trigger 'submit'"):
        d.submit()
    assert len(fake.jobs) == 1


def test_debug_ladder_starts_on_the_debug_qos(fake: FakeScheduler) -> None:
    """With debug_qos configured, a debug dispatch's first job is on dev-eur, then the ladder follows."""
    config = SlurmSettings(park_cap_seconds=CAP, debug_qos="dev-eur")
    d = Driven(Dispatch("dbg", JobSpec("D_probe", "p.sbatch", gpus=1), config.ladder_for("debug")), fake)
    d.submit()
    assert d.state == "SUBMITTED_dev_eur"
    assert d.ladder.qos_names == ("dev-eur", "high-eur", "normal-eur", "low-eur")
    assert SlurmSettings(park_cap_seconds=CAP).ladder_for("debug").first.qos == "high-eur"


def _reach(state: str, d: Dispatch, fake: FakeScheduler, frozen: FrozenDateTimeFactory) -> None:
    """Drive ``d`` into ``state`` (with its guards holding nothing further)."""
    if state in RUNGS:
        walk_to_rung(d, fake, frozen, RUNGS.index(state))
        return
    d.submit()
    assert d.job_id is not None
    if state == RUNNING:
        fake.start(d.job_id)
        poll(d, fake)
    elif state in (PARKED, CANCELLED):
        frozen.tick(CAP)
        poll(d, fake, may_change_rung=False)
        if state == CANCELLED:  # the cancel is answered, and the tick has no room to resubmit
            gone = fake.cancel_if_pending([d.job_id])[d.job_id]
            d.d.cancel_answered(gone, fake.clock.now(), may_change_rung=False)
    elif state == FAILED_TO_GCP:
        for _ in range(3):
            frozen.tick(d.deadline - fake.clock.now())
            poll(d, fake)
    assert d.state == state


ReachFactory = Callable[[str], Driven]


@pytest.fixture
def reached(make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory) -> ReachFactory:
    """Build a dispatch and drive it into a state (``_reach``)."""

    def reach(state: str) -> Driven:
        d = make_dispatch()
        _reach(state, d, fake, frozen)
        return d

    return reach


ALLOWED = {
    (t["source"], t["trigger"])
    for t in (
        {"source": s, "trigger": name}
        for name, event in build_machine(SlurmSettings(park_cap_seconds=CAP).ladder).events.items()
        for s in event.transitions
    )
}
ALL_STATES = (*RUNGS, PARKED, CANCELLED, RUNNING, FAILED_TO_GCP)  # WITHDRAWN: final like RUNNING
FORBIDDEN = [(s, t) for s in ALL_STATES for t in TRIGGERS if t != "submit" and (s, t) not in ALLOWED]


@pytest.mark.parametrize(("state", "trigger"), FORBIDDEN, ids=[f"{s}-{t}" for s, t in FORBIDDEN])
def test_forbidden_transition_raises(
    reached: ReachFactory,
    fake: FakeScheduler,
    frozen: FrozenDateTimeFactory,
    state: str,
    trigger: str,
) -> None:
    """Every trigger without an edge from a state raises TransitionNotAllowed naming it and the state."""
    d = reached(state)
    before = (d.state, len(d.history), len(fake.jobs))
    with pytest.raises(TransitionNotAllowed, match=rf"dispatch {d.id}: trigger '{trigger}' is not allowed from"):
        getattr(d, trigger)()
    assert (d.state, len(d.history), len(fake.jobs)) == before


@pytest.mark.parametrize("state", [s for s in ALL_STATES if s != HIGH])
def test_submit_from_any_later_state_raises(
    reached: ReachFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory, state: str
) -> None:
    """submit is refused from every state but a fresh first rung, so no dispatch starts below high-eur."""
    d = reached(state)
    with pytest.raises(TransitionNotAllowed, match="trigger 'submit' is not allowed"):
        d.submit()


@pytest.mark.parametrize(
    ("state", "trigger"),
    [(HIGH, "park"), (HIGH, "start"), (HIGH, "drop"), (PARKED, "cancel"), (PARKED, "start")],
    ids=[
        "park-before-cap",
        "start-while-pending",
        "drop-while-pending",
        "cancel-unconfirmed",
        "start-parked",
    ],
)
def test_guard_refusal_raises_and_changes_nothing(
    reached: ReachFactory,
    fake: FakeScheduler,
    frozen: FrozenDateTimeFactory,
    state: str,
    trigger: str,
) -> None:
    """A trigger whose guards do not hold raises TransitionNotAllowed naming the guards, state unchanged."""
    d = reached(state)
    with pytest.raises(TransitionNotAllowed, match="refused by its guards"):
        getattr(d, trigger)()
    assert d.state == state


def test_resubmit_cannot_skip_a_rung(reached: ReachFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory) -> None:
    """From CANCELLED after high-eur, resubmit can only lead to normal-eur, never low-eur."""
    d = reached(CANCELLED)
    d.resubmit()
    assert d.state == NORMAL
    assert d.rung.qos == "normal-eur"


def test_rung_whose_window_closed_during_an_outage_is_passed_over(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """After an outage longer than the next rung's window, that rung is passed over without a job."""
    d = submitted()
    t0 = fake.clock.now()
    frozen.tick(2 * CAP + 30)  # the router could not poll for 2 windows
    poll(d, fake)
    assert d.state == LOW
    assert [s.dest for s in d.history] == [HIGH, PARKED, CANCELLED, NORMAL, PARKED, CANCELLED, LOW]
    assert "passed over" in d.history[4].note
    assert [j.qos for j in fake.jobs.values()] == ["high-eur", "low-eur"]
    assert d.deadline == t0 + 3 * CAP


def test_later_rung_that_refuses_the_job_is_skipped(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A later rung whose sbatch refuses the job is skipped with SLURM's words, not retried every tick."""
    d = submitted()
    fake.fail_next_submit(SubmitRejected("sbatch: error: QOSMaxSubmitJobPerUserLimit"))
    frozen.tick(CAP)
    poll(d, fake)
    assert d.state == LOW
    assert "QOSMaxSubmitJobPerUserLimit" in d.history[4].note
    assert [j.qos for j in fake.jobs.values()] == ["high-eur", "low-eur"]


def test_first_rung_refusing_the_job_raises(make_dispatch: DispatchFactory, fake: FakeScheduler) -> None:
    """A job sbatch refuses on the first rung raises SubmitRejected and queues nothing."""
    d = make_dispatch()
    fake.fail_next_submit(SubmitRejected("sbatch: error: Unable to open file train.sbatch"))
    with pytest.raises(SubmitRejected, match="Unable to open file"):
        d.submit()
    assert not fake.jobs
    assert not d.submit_uncertain


def test_in_place_walk_keeps_one_job_and_its_id(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With in_place, a parked job is moved to normal-eur then low-eur by change_qos, keeping its job id."""
    d = submitted(in_place=True)
    job_id = d.job_id
    frozen.tick(CAP)
    poll(d, fake)
    assert (d.state, d.job_id) == (NORMAL, job_id)
    frozen.tick(CAP)
    poll(d, fake)
    assert (d.state, d.job_id) == (LOW, job_id)
    assert len(fake.jobs) == 1
    assert job_id is not None
    assert fake.jobs[job_id].qos == "low-eur"
    assert fake.calls["cancel_if_pending"] == 0
    assert [s.trigger for s in d.history] == ["submit", "park", "move", "park", "move"]
    frozen.tick(CAP)
    poll(d, fake)
    assert d.state == FAILED_TO_GCP
    assert fake.jobs[job_id].state == "CANCELLED"


def test_in_place_move_refused_because_the_job_started_ends_running(
    submitted: SubmitFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job that starts just before its in-place move lands is RUNNING on its first rung, never moved."""
    d = submitted(in_place=True)
    fake.jobs[d.job_id].start_on_cancel = True
    frozen.tick(CAP)
    poll(d, fake)
    assert d.state == PARKED
    poll(d, fake)
    assert d.state == RUNNING
    assert fake.jobs[d.job_id].qos == "high-eur"
    assert len(fake.jobs) == 1


def test_in_place_move_to_a_refused_qos_falls_back_to_cancel(
    make_dispatch: DispatchFactory, frozen: FrozenDateTimeFactory
) -> None:
    """When the next QoS is refused for the move, the dispatch cancels and resubmits (and skips that rung)."""
    from fellows_fsm import SystemClock  # noqa: PLC0415

    fake = FakeScheduler(SystemClock(), granted=["high-eur", "low-eur"])
    d = Driven(make_dispatch(in_place=True).d, fake)
    d.submit()
    frozen.tick(CAP)
    poll(d, fake)
    assert d.state == LOW
    assert "in-place move refused" in d.history[2].note
    assert [j.qos for j in fake.jobs.values()] == ["high-eur", "low-eur"]


@pytest.mark.parametrize(("limit", "counted"), [(60, 60), (80, 120), (3600, 3600), (3601, 3660)])
def test_controller_deadline_counts_the_time_limit_in_whole_minutes(
    submitted: SubmitFactory, fake: FakeScheduler, limit: int, counted: int
) -> None:
    """SLURM rounds --time up to minutes, so the deadline adds the rounded limit (80 s counts as 120 s)."""
    d = submitted(spec=JobSpec("t", "t.sbatch", gpus=1, time_limit_seconds=limit), controller_deadline=True)
    assert fake.jobs[d.job_id].deadline == d.deadline + counted


def test_no_controller_deadline_without_a_time_limit(submitted: SubmitFactory, fake: FakeScheduler) -> None:
    """Without --time there is no --deadline: SLURM would judge it against the partition's own limit."""
    d = submitted(controller_deadline=True)
    assert fake.jobs[d.job_id].deadline is None
