"""One dispatch's way through the ladder, sans I/O: events and answers in, a Decision (effects, wake time) out.

Like h11's Connection: the Dispatch never calls the cluster or the journal. ``advance(observation, now)`` takes a
look at its job and returns what should happen; the driver journals the steps, runs the port calls, and hands
each answer back (``submitted``, ``submit_refused``, ``found``, ``cancel_answered``, ``move_answered``), which
returns the next Decision. Which step comes next is the transition table's order (machine.py); the typed
trigger methods below only keep the dispatch's own bookkeeping (deadlines, notes, the hold and pause clocks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from transitions import Machine, MachineError

from fellows_fsm.core.effects import (
    Attach,
    CancelIfPending,
    Decision,
    Effect,
    FindByToken,
    MoveQos,
    Record,
    Submit,
)
from fellows_fsm.core.guards import OFF_RUNG
from fellows_fsm.core.ladder import Ladder, window_deadline
from fellows_fsm.core.machine import TRIGGERS, Step, StepOrder, build_machine, dispatch_token, state_label, step_order
from fellows_fsm.core.steps import EARLY_PARK, Steps
from fellows_fsm.core.vocab import CANCELLED, PARKED, RUNNING, WITHDRAWN, is_final_state
from fellows_fsm.errors import QosRejected, SubmitRejected, TransitionNotAllowed
from fellows_fsm.scheduler import History, JobSpec, Observation, Phase

__all__ = ["EARLY_PARK", "LOST_AFTER_SECONDS", "SLOW_SUBMIT_SECONDS", "Dispatch"]

SLOW_SUBMIT_SECONDS = 2.0
"""An sbatch answered later than this was held up by the controller: its rung's window opens at the answer."""
LOST_AFTER_SECONDS = 120.0
"""A job unknown to squeue and sacct for this long is gone (a controller that restarted and lost it)."""
_ENTERS_RUNG = frozenset({"resubmit", "move"})
_FINAL = frozenset({RUNNING, WITHDRAWN})


class _Idle(list):  # type: ignore[type-arg]
    """The effects list between events: shared by every dispatch, so it must stay empty (appending is a bug)."""

    def append(self, item: object) -> None:
        raise RuntimeError(f"an effect ({item!r}) outside an event: call it through submit/advance/fire")


_IDLE: list[Effect] = _Idle()


# Not frozen (transitions sets ``state`` on the model); slotted, so 100,000 live dispatches keep no dict each.
@attrs.define(eq=False)
class Dispatch(Steps):
    """One job's way through the ladder: the model the machine drives.

    Deadlines are data. Rung windows follow each other: a rung's window opens when the previous rung's window
    closed (or when the rung was entered, if that was earlier, e.g. after a never-fits skip), so the time to reach
    the last rung's end never exceeds the ladder's worst case by more than one poll.
    """

    id: str
    spec: JobSpec
    ladder: Ladder
    pinned: bool = False
    """A pinned dispatch stays on the first rung: it never parks, walks, or gives up."""
    controller_deadline: bool = False
    """Ask SLURM to drop a rung's job itself (sbatch --deadline) if it cannot start within the window."""
    in_place: bool = False
    """Change rung by moving the pending job to the next QoS (scontrol, same job id) instead of cancel and
    resubmit; slurmctld refuses the move once the job runs, and a refused QoS falls back to cancel."""
    park_early: str = "off"
    """When to leave a rung before its window closes (``[fellows] park_early``; see policy.py); the window still
    bounds every rung."""
    park_early_last_rung: bool = False
    """Whether ``park_early`` also leaves the last rung early (handing the job to the paid lane sooner)."""

    state: str = attrs.field(init=False)
    rung_index: int = attrs.field(init=False, default=0)
    job_id: str | None = attrs.field(init=False, default=None)
    created_at: float = attrs.field(init=False, default=0.0)
    entered_at: float = attrs.field(init=False, default=0.0)
    """When the dispatch entered its current rung."""
    deadline: float = attrs.field(init=False, default=0.0)
    """When the current rung's window closes (its park deadline)."""
    observation: Observation | None = attrs.field(init=False, default=None)
    cluster_history: History | None = attrs.field(init=False, default=None)
    """The cluster's history as the last tick handed it (for ``park_early = "calibrated"``); never fetched here."""
    look: Observation | None = attrs.field(init=False, default=None)
    """The observation, when it is of the current job (what every guard reads); set with them by ``_see``."""
    history: list[Step] = attrs.field(init=False, factory=list)
    note: str = attrs.field(init=False, default="")
    """Written on the next step (why it is taken), then cleared."""
    submit_uncertain: bool = attrs.field(init=False, default=False)
    """A submit may have reached the cluster without its reply: look the token up before submitting again."""
    refused: bool = attrs.field(init=False, default=False)
    """The current rung's submit was refused: nothing was queued on it."""
    moved: bool = attrs.field(init=False, default=False)
    """The parked job was just moved in place to the next rung's QoS."""
    held: bool = attrs.field(init=False, default=False)
    """The current job was last seen held (JobHeldUser/JobHeldAdmin): its window does not walk it away."""
    deferred: bool = attrs.field(init=False, default=False)
    """Someone else moved the current job (its QoS, partition or time limit): it is theirs to place, never walked."""
    first_seen: tuple[str | None, int | None] | None = attrs.field(init=False, default=None)
    """The partition and time limit the current job was first seen pending with (what a later change is read
    against; after a restart, the first look after it)."""
    paused: bool = attrs.field(init=False, default=False)
    """The controller stopped answering: the ladder's clock is stopped until it answers again."""
    paused_since: float | None = attrs.field(init=False, default=None)
    unknown_since: float | None = attrs.field(init=False, default=None)
    """Since when the current job has been unknown to the scheduler (None while it is known)."""
    left_early: bool = attrs.field(init=False, default=False)
    """The rung being left was parked early by ``park_early``: the rest of its window carries to the next rung."""
    now: float = attrs.field(init=False, default=0.0)
    """The time of the event being handled (every guard and step reads it; there is no clock here)."""
    changing: bool = attrs.field(init=False, default=True)
    """Whether this event may change rung (the driver's per-tick bound on resubmits and moves)."""
    leaving: bool = attrs.field(init=False, default=True)
    """Whether this event may park the dispatch (the driver's per-tick bound on parks: a park it could not follow
    with a cancel this tick is not taken, nor paid for, until a tick that can)."""
    _out: list[Effect] = attrs.field(init=False, factory=lambda: _IDLE)
    """The effects of the event being handled; between events the shared ``_IDLE`` (which refuses effects)."""
    _order: StepOrder = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.state = self.ladder.first.state_name
        self._order = step_order(self.ladder)  # the table's rows per state (shared by every dispatch of a ladder)

    @classmethod
    def restore(
        cls,
        dispatch_id: str,
        spec: JobSpec,
        ladder: Ladder,
        *,
        history: Sequence[Step],
        jobs: Mapping[int, str],
        pinned: bool = False,
        controller_deadline: bool = False,
        in_place: bool = False,
        park_early: str = "off",
        park_early_last_rung: bool = False,
    ) -> Dispatch:
        """Rebuild a dispatch from its journaled steps and rung jobs, exactly where it stood.

        Deadlines are recomputed from the steps' wall-clock times, so the remaining budget is what it was. A rung
        without a journaled job may have been submitted just before a crash: the next look finds its token first.
        """
        d = cls(
            dispatch_id,
            spec,
            ladder,
            pinned=pinned,
            controller_deadline=controller_deadline,
            in_place=in_place,
            park_early=park_early,
            park_early_last_rung=park_early_last_rung,
        )
        if not history:
            return d  # journaled but never submitted: the submit step is written before sbatch runs
        d.history = list(history)
        d.created_at = history[0].at
        held_since = paused_since = 0.0
        for step in history:
            rung = ladder.rungs[step.rung_index]
            if step.trigger == "submit":
                d.entered_at, d.deadline = step.at, step.at + rung.park_cap_seconds
            elif step.trigger == "park":
                d.left_early = step.note.startswith(EARLY_PARK)
            elif step.trigger in _ENTERS_RUNG:
                d.entered_at = step.at
                d.deadline = window_deadline(d.deadline, step.at, rung, carried=d.left_early)
                d.left_early = False
            elif step.trigger == "hold":
                held_since = step.at
            elif step.trigger == "release":
                d.deadline += step.at - held_since
            elif step.trigger == "pause":
                paused_since = step.at
            elif step.trigger == "resume":
                d.deadline += step.at - paused_since
        for step in history:
            d.held = step.trigger == "hold" or (d.held and step.trigger not in ("release", *_ENTERS_RUNG))
            d.deferred = step.trigger == "defer" or (d.deferred and step.trigger not in _ENTERS_RUNG)
            d.paused = step.trigger == "pause" or (d.paused and step.trigger != "resume")
        if d.paused:
            d.paused_since = paused_since
        last = history[-1]
        d.state = last.dest
        d.rung_index = last.rung_index
        d._see(jobs.get(d.rung_index), None)
        d.submit_uncertain = d.job_id is None and d.on_rung
        return d

    # ----------------------------------------------------------------- what the dispatch is
    @property
    def machine(self) -> Machine:
        """The machine that fires this dispatch's steps (shared by every dispatch on the same ladder)."""
        return build_machine(self.ladder)

    @property
    def label(self) -> str:
        """The human label of the current state, e.g. ``RESUBMITTED(normal-eur)``."""
        return state_label(self.ladder, self.state)

    @property
    def is_final(self) -> bool:
        """True once nothing more will happen: RUNNING, WITHDRAWN, or a pinned dispatch's job gone."""
        state = self.state
        return state in _FINAL or (state == CANCELLED and self.pinned)

    def token(self) -> str:
        """The tag the current rung's job carries on the cluster, so a lost submit reply can be found again."""
        return dispatch_token(self.id, self.rung_index)

    # ----------------------------------------------------------------- events in, decisions out
    def submit(self, now: float, *, may_change_rung: bool = True) -> Decision:
        """Submit the job on the first rung; allowed once, and only on the first rung.

        ``may_change_rung=False``: a refused QoS leaves the dispatch CANCELLED for the next tick to walk on.
        """
        first = self.ladder.first
        if self.history or self.state != first.state_name or self.job_id is not None:
            raise TransitionNotAllowed(
                f"dispatch {self.id}: trigger 'submit' is not allowed from state {self.label} "
                f"(a dispatch is submitted once, on its first rung {first.label})"
            )
        self._begin(now, changing=may_change_rung)
        self.created_at = self.entered_at = now
        self.deadline = now + first.park_cap_seconds
        self._record("submit", "", first.state_name, 0, job_id=None)
        return self._decide()

    def advance(
        self,
        observation: Observation | None,
        now: float,
        *,
        may_change_rung: bool = True,
        may_leave: bool = True,
        history: History | None = None,
    ) -> Decision:
        """Take one (answered) look at the current job and take every step the table allows now.

        ``may_change_rung=False`` lets the driver bound how many dispatches resubmit or move in one tick: the
        dispatch may still start or park, but waits in PARKED or CANCELLED for a later tick. ``may_leave=False``
        bounds the parks likewise: the dispatch may still start, be withdrawn or held, but stays on its rung.
        ``history``: the cluster's history (``park_early = "calibrated"``), kept until a later tick hands another.
        """
        if history is not None:
            self.cluster_history = history
        if (
            (now < self.deadline or not may_leave)
            and self.state not in OFF_RUNG
            and self.job_id is not None
            and not self.paused
            and not (self.calibrating and may_leave)
            and (observation is None or (observation == self.observation and observation.phase is not Phase.UNKNOWN))
        ):
            # Nothing new, and no park may be taken: every guard answers as it did last time.
            return Decision((), None if self.held or self.deferred or self.pinned else self.deadline)
        self._begin(now, changing=may_change_rung)
        self.leaving = may_leave
        if not self.history:
            return self.submit(
                now, may_change_rung=may_change_rung
            )  # journaled but never submitted (enqueued, a crash, or SLURM was down)
        if observation is not None and self.job_id is not None and observation.job_id == self.job_id:
            self._see(self.job_id, self._checked(observation))
        self._settle()
        return self._decide()

    def pause(self, now: float, since: float | None = None, *, why: str = "") -> Decision:
        """The controller does not answer, or no driver watched: stop the ladder's clock, so neither walks a job
        past a free rung to a paid lane (every window, this one and the later ones, resumes where it stood).

        ``since`` is when the clock stopped (the controller's last answer, the tick no driver took); it defaults
        to now, and the step is journaled at it. ``why`` is the step's note (default: SLURM has not answered).
        Nothing happens to a pinned, final, never-submitted or already paused dispatch.
        """
        self._begin(now, changing=False)
        if self.paused or self.is_final or not self.history or not self.walks_ladder():
            return Decision((), None)
        self._pause(since, why)
        out, self._out = self._out, _IDLE
        return Decision(tuple(out), None)

    def fire(self, trigger: str, now: float) -> Decision:
        """Fire one trigger by hand, out of the table's order (tests, tools): its guards must hold, else
        TransitionNotAllowed names them; the effects it then needs come back as with any event."""
        if trigger == "submit":
            return self.submit(now)
        if trigger not in TRIGGERS:
            raise TransitionNotAllowed(f"dispatch {self.id}: {trigger!r} is not a trigger; use one of {TRIGGERS}")
        self._begin(now, changing=True)
        getattr(self, "_" + trigger)()
        return self._decide()

    def submitted(self, job_id: str, now: float, *, asked_at: float | None = None) -> Decision:
        """The submit's answer: the current rung's job is ``job_id``.

        ``asked_at``: when sbatch was called. An answer slower than ``SLOW_SUBMIT_SECONDS`` (a stalled controller)
        is an outage of its own: the rung's window stops from the call to the answer (a pause and a resume), so
        it counts from when the job was really queued, never from before it existed.
        """
        self._begin(now, changing=self.changing)
        self._attach(job_id, None)
        if (
            asked_at is not None
            and now - asked_at > SLOW_SUBMIT_SECONDS
            and self.on_rung
            and self.walks_ladder()
            and not self.paused
            and self.history
            and asked_at >= self.history[-1].at
        ):
            self._pause(asked_at, f"sbatch took {now - asked_at:.0f} s to answer; the window counts from its answer")
            self._resume()
        return self._decide()

    def submit_refused(self, error: SubmitRejected, now: float) -> Decision:
        """The cluster refused the current rung's submit: nothing was queued. The rung is skipped (a refused QoS,
        or any refusal on a later rung); on the first rung a refusal of the job itself is raised again, since
        there is nothing to walk (the driver ends the dispatch as refused)."""
        self._begin(now, changing=self.changing)
        self.submit_uncertain = False
        if not isinstance(error, QosRejected) and self.rung_index == 0:
            raise error
        self.note = f"{self.rung.qos} refused by the cluster: {error}"
        self.refused = True
        self._settle()
        return self._decide()

    def found(self, observation: Observation | None, now: float) -> Decision:
        """The token lookup's answer: the job an unanswered submit queued after all, or None (never queued)."""
        self._begin(now, changing=self.changing)
        self.submit_uncertain = False
        if observation is not None:
            self._attach(observation.job_id, observation)
            self._see(self.job_id, self._checked(observation))
        self._settle()
        return self._decide()

    def cancel_answered(self, observation: Observation, now: float, *, may_change_rung: bool = True) -> Decision:
        """A cancel's answer for the parked job (GONE: the cancel proved it gone; STARTED: it started first)."""
        self._begin(now, changing=may_change_rung)
        if observation.job_id == self.job_id:
            self._see(self.job_id, observation)
        self._settle()
        return self._decide()

    def move_answered(self, answer: bool | QosRejected, now: float) -> Decision:
        """The in-place move's answer: True (moved, same job id), False (no longer pending: the next look says),
        or the next QoS refused for this job (then the job is cancelled and resubmitted instead)."""
        self._begin(now, changing=self.changing)
        if isinstance(answer, QosRejected):
            self.note = f"in-place move refused ({answer}); cancelling instead"
            self.in_place = False
        elif not answer:
            self._out = _IDLE
            return Decision((), self._wake_at())  # no longer pending (it started, or ended): the next look says
        else:
            self.moved = True
            self._settle()
        return self._decide()

    # ----------------------------------------------------------------- the step loop: the table's order
    def _see(self, job_id: str | None, observation: Observation | None) -> None:
        """Set the current job and the last observation (and ``look``, what the guards read) together; the first
        pending look at a job is what an outside change of its partition or time limit is read against."""
        if job_id != self.job_id:
            self.first_seen = None
        self.job_id = job_id
        self.observation = observation
        self.look = (
            observation if observation is not None and job_id is not None and observation.job_id == job_id else None
        )
        if self.first_seen is None and self.look is not None and self.look.phase is Phase.PENDING:
            self.first_seen = (self.look.partition, self.look.time_limit_seconds)

    def _begin(self, now: float, *, changing: bool) -> None:
        self.now = now
        self.changing = changing
        self.leaving = True
        self._out = []

    def _settle(self) -> None:
        """Take the first step of the current state whose guards hold, then look again, until none holds."""
        for _ in range(3 * len(self.ladder.rungs) + 4):
            trigger = self._next_trigger()
            if trigger is None:
                return
            getattr(self, "_" + trigger)()

    def _next_trigger(self) -> str | None:
        """The first row of the current state, in table order, whose guards all hold (machine.step_order)."""
        rows = self._order.get(self.state)
        return None if rows is None else rows(self)

    def _decide(self) -> Decision:
        """The effects the dispatch now needs (after its steps' journal effects), and when to look again."""
        on_rung = self.state not in OFF_RUNG
        if on_rung and self.job_id is not None:  # waiting on its rung: nothing to ask (the common case)
            out, self._out = self._out, _IDLE
            wake = None if self.pinned or self.held or self.deferred or self.paused else self.deadline
            return Decision(tuple(out), wake) if out else Decision((), wake)
        if on_rung and self.job_id is None and not self.refused:
            if self.submit_uncertain:
                self._out.append(FindByToken(self.id, self.token()))
            else:
                self._out.append(self._submit_effect())
        elif self.state == PARKED and self.job_id is not None and not (self.job_gone() or self.job_started()):
            if self.in_place and self.rung_index + 1 < len(self.ladder.rungs):
                if self.changing:
                    self._out.append(MoveQos(self.id, self.job_id, self.ladder.rungs[self.rung_index + 1].qos))
            else:
                self._out.append(CancelIfPending(self.id, self.job_id))
        out, self._out = self._out, _IDLE
        return Decision(tuple(out), self._wake_at())

    def _wake_at(self) -> float | None:
        if self.on_rung and self.walks_ladder() and not (self.held or self.deferred or self.paused):
            return self.deadline
        return None

    def _submit_effect(self) -> Submit:
        deadline = None
        if self.controller_deadline and not self.pinned and self.spec.time_limit_seconds is not None:
            # Only with a time limit: SLURM drops a job that cannot END by the deadline, so without one (the
            # partition's limit, possibly INFINITE) it could drop or truncate a job that would start. SLURM keeps
            # time limits in whole minutes (--time rounds up): judged against the rounded limit, a deadline that
            # counted the raw seconds would drop the job the moment it is queued.
            deadline = self.deadline + 60 * math.ceil(self.spec.time_limit_seconds / 60)
        self.submit_uncertain = True  # until the answer comes: a lost answer is looked up by token, never resent
        return Submit(self.id, self.spec, self.rung.qos, self.token(), deadline)

    def _attach(self, job_id: str, observation: Observation | None) -> None:
        self._out.append(Attach(self.id, self.rung_index, job_id, self.now))
        self._see(job_id, observation)
        self.submit_uncertain = False

    def _checked(self, obs: Observation) -> Observation:
        """``obs`` as it bears on this dispatch: a stranger's job under our id, or a job unknown for too long, is
        our job gone (a controller that restarted lost it and reused its id); nothing else is changed."""
        token = obs.token  # ours is fsm-<dispatch id>-r<rung>
        if token is not None and not (
            token.startswith("fsm-") and token.startswith(self.id, 4) and token.startswith("-r", 4 + len(self.id))
        ):
            self.note = f"job id {obs.job_id} now belongs to another job ({obs.token}); ours was lost by the controller"
            return Observation(obs.job_id, Phase.GONE, state="LOST")
        if obs.phase is not Phase.UNKNOWN:
            self.unknown_since = None
            return obs
        if self.unknown_since is None:
            self.unknown_since = self.now
        if self.now - self.unknown_since < LOST_AFTER_SECONDS:
            return obs
        self.note = (
            f"job {obs.job_id} unknown to squeue and sacct for {self.now - self.unknown_since:.0f} s; taken as lost"
        )
        return Observation(obs.job_id, Phase.GONE, state="LOST")

    # ----------------------------------------------------------------- transitions' side
    def _fire(self, trigger: str) -> None:
        """Fire ``trigger`` through the machine (which checks its guards again and journals the step)."""
        try:
            moved = self.machine.events[trigger].trigger(self)
        except MachineError:
            raise TransitionNotAllowed(
                f"dispatch {self.id}: trigger {trigger!r} is not allowed from state {self.label}"
            ) from None
        if not moved:
            edges = self.machine.events[trigger].transitions.get(self.state, [])
            guards = " or ".join(
                " & ".join(getattr(c.func, "__name__", str(c.func)) for c in e.conditions) for e in edges
            )
            raise TransitionNotAllowed(
                f"dispatch {self.id}: trigger {trigger!r} from state {self.label} refused by its guards "
                f"({guards} did not hold)"
            )

    def record_step(self, event: Any) -> None:
        """Journal the transition about to happen (transitions' before_state_change): a Record effect."""
        dest = event.transition.dest or self.state  # an internal transition stays where it is
        name = event.event.name
        if name == "resubmit":
            # The step announces the next rung's submit; its job id is journaled once sbatch answers.
            self._record(name, self.state, dest, self.rung_index + 1, job_id=None)
        elif name == "move":
            self._record(name, self.state, dest, self.rung_index + 1, job_id=self.job_id)
        else:
            self._record(name, self.state, dest, self.rung_index, job_id=self.job_id)

    def _record(self, trigger: str, source: str, dest: str, rung_index: int, *, job_id: str | None) -> None:
        obs = self.look
        qos = self.ladder.rungs[rung_index].qos
        if obs is not None and obs.qos and rung_index == self.rung_index and self.on_rung:
            qos = obs.qos  # what SLURM reports (someone may have moved the job): the journal believes SLURM
        step = Step(
            at=self.now,
            source=source,
            dest=dest,
            trigger=trigger,
            rung_index=rung_index,
            qos=qos,
            job_id=job_id,
            reason=obs.reason if obs is not None else None,
            note=self.note,
        )
        self.history.append(step)
        final = is_final_state(dest, pinned=self.pinned)
        self._out.append(Record(self.id, step, state_label(self.ladder, dest), final))
        self.note = ""
