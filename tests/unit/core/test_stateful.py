"""A hypothesis state machine drives one dispatch with random observations and time jumps.

After every step it checks the ladder's invariants against the fake cluster and the dispatch's own
history, recomputing the rung deadlines independently of the Dispatch's bookkeeping.
"""

from __future__ import annotations

from typing import Any

from freezegun import freeze_time
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fellows_fsm import (
    FAILED_TO_GCP,
    PARKED,
    RUNNING,
    Dispatch,
    FakeScheduler,
    JobSpec,
    QosRejected,
    ReasonGroup,
    SlurmSettings,
    SystemClock,
    classify_reason,
)
from fellows_fsm.core.looks import LOST_AFTER_SECONDS
from fellows_fsm.testing import Driven

POLL = 10.0
REASONS = [
    None,
    "QOSMaxGRESPerUser",
    "Resources",
    "Priority",
    "JobHeldUser",
    "QOSGrpGRES",
    "QOSMaxWallDurationPerJobLimit",
    "InvalidQOS",
]


def held_seconds(d: Driven) -> float:
    """How long the dispatch's jobs were held by someone (hold to release steps, each plus one poll to notice)."""
    total, since = 0.0, None
    for step in d.history:
        if step.trigger == "hold":
            since = step.at
        elif since is not None and step.trigger in ("release", "withdraw", "start", "drop"):
            total += step.at - since + POLL
            since = None
    return total


class LadderWalk(RuleBasedStateMachine):
    """One dispatch on the fake port; the cluster and the clock move at random between polls."""

    def __init__(self) -> None:
        super().__init__()
        self.freezer = freeze_time("2026-11-30 12:00:00")
        self.frozen: Any = self.freezer.start()
        self.fake = FakeScheduler(SystemClock())
        self.d: Driven | None = None
        self.lost_jobs = 0

    def teardown(self) -> None:
        self.freezer.stop()

    @initialize(
        cap=st.integers(min_value=1, max_value=30),
        later=st.none() | st.integers(min_value=1, max_value=30),
        ladder=st.sampled_from([("high-eur",), ("high-eur", "normal-eur"), ("high-eur", "normal-eur", "low-eur")]),
        in_place=st.booleans(),
        park_early=st.sampled_from(["off", "own-cap", "estimate"]),
        last_rung=st.booleans(),
    )
    def submit(
        self, cap: int, later: int | None, ladder: tuple[str, ...], in_place: bool, park_early: str, last_rung: bool
    ) -> None:
        config = SlurmSettings(
            park_cap_seconds=cap, later_park_cap_seconds=later, qos_ladder=ladder[1:], poll_interval_seconds=POLL
        )
        self.d = Driven(
            Dispatch(
                "h1",
                JobSpec("train", "train.sbatch", gpus=8),
                config.ladder,
                in_place=in_place,
                park_early=park_early,
                park_early_last_rung=last_rung,
            ),
            self.fake,
        )
        self.d.submit()

    # ------------------------------------------------------------------ the world moves
    def _pending_job(self) -> str | None:
        d = self.d
        if d is None or d.job_id is None:
            return None
        job = self.fake.jobs[d.job_id]
        return d.job_id if job.state == "PENDING" and not job.forgotten else None

    @rule(reason=st.sampled_from(REASONS))
    def pending_reason(self, reason: str | None) -> None:
        """The job stays pending, with any reason SLURM gives."""
        if (job_id := self._pending_job()) is not None:
            self.fake.set_pending(job_id, reason)

    @rule(reason=st.sampled_from(REASONS), ahead=st.none() | st.floats(min_value=-60, max_value=120))
    def pending_with_an_estimate(self, reason: str | None, ahead: float | None) -> None:
        """The job stays pending with a reason and SLURM's start estimate ``ahead`` seconds from now (or N/A)."""
        if (job_id := self._pending_job()) is not None:
            expected = None if ahead is None else self.fake.clock.now() + ahead
            self.fake.set_pending(job_id, reason, expected_start=expected)

    @rule()
    def job_starts(self) -> None:
        """The scheduler starts the job."""
        if (job_id := self._pending_job()) is not None:
            self.fake.start(job_id)

    @rule(state=st.sampled_from(["CANCELLED", "DEADLINE"]))
    def job_vanishes(self, state: str) -> None:
        """The job ends without starting (cancelled by someone else, or the controller's deadline)."""
        if (job_id := self._pending_job()) is not None:
            self.fake.end(job_id, state)

    @rule()
    def job_is_forgotten(self) -> None:
        """squeue and sacct both lose the job: it reads UNKNOWN (until the dispatch takes it as lost)."""
        if (job_id := self._pending_job()) is not None:
            self.fake.forget(job_id)
            self.lost_jobs += 1

    @rule()
    def next_cancel_races_a_start(self) -> None:
        """The job will start just before the next cancel lands."""
        if (job_id := self._pending_job()) is not None:
            self.fake.jobs[job_id].start_on_cancel = True

    @rule()
    def next_submit_refuses_qos(self) -> None:
        """The cluster will refuse the next rung's QoS at submit."""
        self.fake.fail_next_submit(QosRejected("x", "Invalid qos specification"))

    @precondition(lambda self: self.d is not None)
    @rule(seconds=st.integers(min_value=0, max_value=int(POLL)) | st.floats(min_value=0, max_value=POLL))
    def poll_after(self, seconds: float) -> None:
        """Time moves on by at most one poll interval, then the router polls once."""
        assert self.d is not None
        self.frozen.tick(seconds)
        obs = self.fake.observe([self.d.job_id]).get(self.d.job_id) if self.d.job_id else None  # type: ignore[list-item]
        self.d.advance(obs)

    # ------------------------------------------------------------------ what must always hold
    @invariant()
    def first_submission_is_on_the_first_rung(self) -> None:
        """The first step is a submit onto rung 0, and the first job queued is on the preferred QoS."""
        if self.d is None:
            return
        first = self.d.history[0]
        assert (first.trigger, first.dest, first.rung_index) == ("submit", self.d.ladder.first.state_name, 0)
        jobs = list(self.fake.jobs.values())
        if jobs:
            assert jobs[0].submitted_qos == self.d.ladder.first.qos or first.note or self.d.history[1].note

    @invariant()
    def rungs_never_go_back_or_repeat(self) -> None:
        """Rung states are entered in strictly increasing ladder order, each at most once."""
        if self.d is None:
            return
        entered = [s.rung_index for s in self.d.history if s.trigger in ("submit", "resubmit", "move")]
        assert entered == list(range(len(entered)))
        qos = [j.submitted_qos for j in self.fake.jobs.values()]
        order = self.d.ladder.qos_names
        assert [order.index(q) for q in qos] == sorted({order.index(q) for q in qos})

    @invariant()
    def never_parked_before_its_window_closes(self) -> None:
        """Every park happens at or after the rung's deadline, unless the reason proves it can never start."""
        if self.d is None:
            return
        deadline, carried = 0.0, False
        for step in self.d.history:
            cap = self.d.ladder.rungs[step.rung_index].park_cap_seconds
            if step.trigger == "submit":
                deadline = step.at + cap
            elif step.trigger in ("resubmit", "move"):
                deadline = (deadline if carried else min(deadline, step.at)) + cap
                carried = False
            elif step.trigger == "park":
                group = classify_reason(step.reason)
                early_ok = group in (ReasonGroup.NEVER_FITS, ReasonGroup.INVALID) or self._early_by_policy(
                    step.note, group
                )
                carried = step.note.startswith("park_early=")
                assert step.at >= deadline or early_ok, (step, deadline)

    def _early_by_policy(self, note: str, group: ReasonGroup) -> bool:
        """Is a park before the window's end one the dispatch's park_early policy allows (never off, never held)?"""
        assert self.d is not None
        if (
            self.d.park_early == "off"
            or not note.startswith(f"park_early={self.d.park_early}: ")
            or group is ReasonGroup.HELD
        ):
            return False
        return self.d.park_early == "estimate" or group is ReasonGroup.OWN_CAP

    @invariant()
    def at_most_one_live_job(self) -> None:
        """Never two pending or running jobs for the dispatch on the cluster."""
        live = [j for j in self.fake.jobs.values() if j.state in ("PENDING", "RUNNING") and not j.forgotten]
        assert len(live) <= 1

    @invariant()
    def gcp_only_after_the_last_rung(self) -> None:
        """FAILED_TO_GCP only follows the last rung, with every job of the dispatch gone unstarted."""
        if self.d is None or self.d.state != FAILED_TO_GCP:
            return
        assert self.d.history[-2].rung_index == len(self.d.ladder.rungs) - 1
        assert all((j.start_time is None and j.state != "PENDING") or j.forgotten for j in self.fake.jobs.values())

    @invariant()
    def gcp_within_worst_case_plus_one_poll(self) -> None:
        """The last rung is left (parked or dropped) within the ladder's worst case plus one poll, plus, for each
        job the controller lost, the bound on how long an unknown job is waited for before it is taken as gone,
        plus the time held; FAILED_TO_GCP follows at once, or, where the cancel must be read back, one poll later.

        The read-back poll is the design's "two where a cancel must be read back": here only when the last rung was
        entered by an in-place move in the very tick it parks (its window had closed already). The move leaves no
        look at the job on its new QoS and spends the tick's rung change, so the driver cannot take the cancel's
        proof that tick, and the next poll reads the job back gone. Any other cancel here is proved at once, or
        (a job the controller lost) read back as lost, within the lost-job allowance.
        """
        if self.d is None or self.d.state != FAILED_TO_GCP:
            return
        history = self.d.history
        last = self.d.ladder.last.state_name
        left = max(i for i, step in enumerate(history) if step.source == last)
        allowance = self.lost_jobs * (LOST_AFTER_SECONDS + POLL) + held_seconds(self.d)
        assert history[left].at - history[0].at <= self.d.ladder.worst_case_seconds + POLL + allowance
        read_back = history[-1].at - history[left].at
        moved = history[left - 1]
        in_place = history[left].trigger == "park" and (moved.trigger, moved.at) == ("move", history[left].at)
        if read_back > 0 and not in_place:
            assert self.lost_jobs, history[-2]
            assert "taken as lost" in history[-2].note, history[-2]
        if in_place:
            assert read_back <= POLL
        waited = history[-1].at - history[0].at
        assert waited <= self.d.ladder.worst_case_seconds + POLL + (POLL if in_place else 0) + allowance

    @invariant()
    def running_only_when_the_job_started(self) -> None:
        """RUNNING is entered only for a job the cluster started, and nothing is submitted after it."""
        if self.d is None or self.d.state != RUNNING:
            return
        assert self.d.job_id is not None
        assert self.fake.jobs[self.d.job_id].start_time is not None
        assert list(self.fake.jobs)[-1] == self.d.job_id

    @invariant()
    def parked_only_from_a_rung(self) -> None:
        """PARKED is always entered from a rung state, never from CANCELLED or a final state."""
        if self.d is None:
            return
        for step in self.d.history:
            if step.dest == PARKED:
                assert step.source in {r.state_name for r in self.d.ladder.rungs}


def test_in_place_move_into_a_closed_window_reads_its_cancel_back_one_poll_later() -> None:
    """Cap 1 s, two rungs, in place, polls after 4 and 9 s: parked at 4 s, the cancel is read back, GCP at 13 s."""
    with freeze_time("2026-11-30 12:00:00") as frozen:
        fake = FakeScheduler(SystemClock())
        config = SlurmSettings(park_cap_seconds=1, qos_ladder=("normal-eur",), poll_interval_seconds=POLL)
        d = Driven(Dispatch("h1", JobSpec("train", "train.sbatch", gpus=8), config.ladder, in_place=True), fake)
        d.submit()
        for seconds in (4, 9):
            frozen.tick(seconds)
            assert d.job_id is not None
            d.advance(fake.observe([d.job_id]).get(d.job_id))
        steps = [(step.at - d.history[0].at, step.trigger, step.rung_index) for step in d.history]
        assert steps == [
            (0, "submit", 0),
            (4, "park", 0),
            (4, "move", 1),
            (4, "park", 1),  # the next window (chained: 1 s + 1 s) closed before the move
            (13, "cancel", 1),  # the next poll reads the cancelled job back
            (13, "give_up", 1),
        ]
        assert d.state == FAILED_TO_GCP
        assert d.ladder.worst_case_seconds + POLL < 13  # past one poll: the read-back's poll, and only that one


LadderWalk.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLadderWalk = LadderWalk.TestCase
TestLadderWalk.__doc__ = "Random observations and time jumps never break the ladder's invariants."
