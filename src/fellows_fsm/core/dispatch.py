"""One dispatch's way through the ladder, sans I/O: events and answers in, a Decision (effects, wake time) out.

Like h11's Connection: the Dispatch never calls the cluster or the journal. ``advance(look, now)`` hands it a look
at its job and returns what should happen; the driver journals the steps, runs the port calls, and hands each
answer back (``submitted``, ``submit_refused``, ``found``, ``cancel_answered``, ``move_answered``), which returns
the next Decision. Which step comes next, and what each step keeps, is the table's (lifecycle.py); this file holds
the dispatch's data, reads its answers, and says which port call its state needs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence

import attrs

from fellows_fsm.core import lifecycle, looks, machine, policy
from fellows_fsm.core.effects import (
    Attach,
    CancelIfPending,
    CommandEnd,
    Decision,
    Effect,
    FindByToken,
    MoveQos,
    Step,
    Submit,
)
from fellows_fsm.core.ladder import Ladder, Rung, state_label
from fellows_fsm.core.looks import LOST_AFTER_SECONDS
from fellows_fsm.core.paid import Gate
from fellows_fsm.core.paid_tail import LaneSaid
from fellows_fsm.core.vocab import FINAL_STATES, FOLLOWED_STATES, State, Trigger
from fellows_fsm.errors import QosRejected, SubmitRejected, TransitionNotAllowed
from fellows_fsm.scheduler.port import JobSpec, Observation, Phase, Workload

__all__ = ["SLOW_SUBMIT_SECONDS", "Dispatch", "ended_of", "unended"]

SLOW_SUBMIT_SECONDS = 2.0
"""An sbatch answered later than this was held up by the controller: its rung's window opens at the answer."""
_FIXED, _NEVER = frozenset(State), math.inf
_PINNED_FINALS = FINAL_STATES | {State.CANCELLED}  # a pinned dispatch's job gone: nothing more will happen
_ENDED = (Phase.GONE, Phase.STARTED)  # a parked job seen so has no cancel or move left to ask
_PENDING, _UNKNOWN = Phase.PENDING, Phase.UNKNOWN  # (module names: an Enum member read off its class is slow)
_LOOK = operator.attrgetter(*(field.name for field in attrs.fields(Observation) if field.eq))
"""The fields Observation's ``==`` compares, read as one tuple in C: a look is matched to its memo's by these (what
``==`` compares, for less, for every live dispatch every tick; the tuples are dropped at once, none is kept)."""


class _Idle(list):  # type: ignore[type-arg]
    """The effects list between events: shared by every dispatch, so it must stay empty (appending is a bug)."""

    def append(self, item: object) -> None:
        raise RuntimeError(f"an effect ({item!r}) outside an event: call it through submit/advance/fire")


_IDLE: list[Effect] = _Idle()


# Not frozen (transitions sets ``state`` on the model); slotted, so 100,000 live dispatches keep no dict each.
@attrs.define(eq=False)
class Dispatch:
    """One job's way through the ladder: the model the machine drives (its rows are in lifecycle.py)."""

    id: str
    spec: JobSpec
    ladder: Ladder
    pinned: bool = False
    """A pinned dispatch stays on the first rung: it never parks, walks, or gives up."""
    controller_deadline: bool = False
    """Ask SLURM to drop a rung's job itself (sbatch --deadline) if it cannot start within the window."""
    in_place: bool = False
    """Change rung by moving the pending job to the next QoS (scontrol, same job id), not cancel and resubmit."""
    park_early: str = "off"
    """When to leave the current rung before its window closes (``[fellows] park_early``, or the rung's lane's own
    on another cluster: ``Rung.park_early``; see policy.py)."""
    park_early_last_rung: bool = False
    """Whether ``park_early`` also leaves the last rung early (handing the job to the paid lane sooner)."""

    base_park_early: str = attrs.field(init=False, default="off")
    """The dispatch's own ``park_early`` (its rungs on fellows use it)."""
    state: str = attrs.field(init=False)
    rung_index: int = attrs.field(init=False, default=0)
    job_id: str | None = attrs.field(init=False, default=None)
    look: Observation | None = attrs.field(init=False, default=None)
    """The last look at the current job (what every guard reads); None before one, or once the job changes."""
    history: list[Step] = attrs.field(init=False, factory=list)
    """The steps taken (what the journal holds); a restored dispatch replays them."""
    deadline: float = attrs.field(init=False, default=0.0)
    """When the current rung's window closes (its park deadline: lifecycle.window_deadline)."""
    paused_since: float | None = attrs.field(init=False, default=None)
    """Since when the ladder's clock is stopped (the controller stopped answering, or no driver watched)."""
    unknown_since: float | None = attrs.field(init=False, default=None)
    """Since when the current job has been unknown to the scheduler (None while it is known)."""
    first_seen: tuple[str | None, int | None] | None = attrs.field(init=False, default=None)
    """The partition and time limit the current job was first seen pending with (what a change is read against)."""
    cluster_workload: Workload | None = attrs.field(init=False, default=None)
    """The cluster's workload as the last tick handed it (for ``park_early = "calibrated"``); never fetched here."""
    note: str = attrs.field(init=False, default="")
    """Written on the next step (why it is taken), then cleared."""
    submit_uncertain: bool = attrs.field(init=False, default=False)
    """A submit may have reached the cluster without its reply: look the token up before submitting again."""
    refused: bool = attrs.field(init=False, default=False)
    """The current rung's submit was refused: nothing was queued on it."""
    unreached: bool = attrs.field(init=False, default=False)
    """This event's sbatch never reached its cluster: no submit again until the next look (the next poll)."""
    moved: bool = attrs.field(init=False, default=False)
    """The parked job was just moved in place to the next rung's QoS."""
    held: bool = attrs.field(init=False, default=False)
    """The current job was last seen held (JobHeldUser/JobHeldAdmin): its window does not walk it away."""
    deferred: bool = attrs.field(init=False, default=False)
    """Someone else moved the current job: it is theirs to place, never walked."""
    left_early: bool = attrs.field(init=False, default=False)
    """The rung being left was parked early by ``park_early``: the rest of its window carries to the next rung."""
    now: float = attrs.field(init=False, default=0.0)
    """The time of the event being handled (every guard and step reads it; there is no clock here)."""
    may_change_rung: bool = attrs.field(init=False, default=True)
    """This event may change rung (the driver's per-tick bound on resubmits and moves)."""
    may_leave_rung: bool = attrs.field(init=False, default=True)
    """This event may park the dispatch (the driver's per-tick bound on rung changes begun)."""
    waits_for_room: bool = attrs.field(init=False, default=False)
    """The last look found a row refused only by the tick's bound on rung changes: it changes rung on a tick with
    room."""
    recalled: tuple[str, ...] = attrs.field(init=False, default=())  # what a recall's CancelJobs scancels
    paid_gate: Gate | None = attrs.field(init=False, default=None)
    """The budget its last free rung asks before the paid lane (set by the driver; None: no paid lane after its
    ladder, or no budget)."""
    budget_note: str = attrs.field(init=False, default="")
    """The budget's last journaled reason to keep it on its last free rung (a new reason is journaled again)."""
    news: CommandEnd | LaneSaid | None = attrs.field(init=False, default=None)
    """What the driver heard of its lane command's end or its paid job, while the row it asks is found and fired."""
    effects: list[Effect] = attrs.field(init=False, factory=lambda: _IDLE)
    """The effects of the event being handled; between events the shared ``_IDLE`` (which refuses effects)."""
    rows: machine.Rows = attrs.field(init=False, repr=False)  # the table's rows a look asks (rows_by_state)
    _gates: dict[str, tuple[bool, bool]] = attrs.field(init=False, repr=False)
    _quiet: tuple[Observation | None, bool, bool, float, Decision] | None = attrs.field(init=False, default=None)
    """A look that took no step: its look, permits, until when no row can hold, and its Decision (matched: returned)."""
    finals: frozenset[str] = attrs.field(init=False, repr=False)
    """The states it ends in (a pinned one's CANCELLED too): ``state in finals`` is ``is_final``, asked without a
    call by the tick's scans of every live dispatch (``unended``, ``ended_of``)."""

    def __attrs_post_init__(self) -> None:
        self.finals = _PINNED_FINALS if self.pinned else FINAL_STATES
        self.state = self.ladder.first.state_name
        self.base_park_early = self.park_early
        self.park_early = self.ladder.first.park_early or self.park_early
        self.rows = machine.rows_by_state(self.ladder)  # shared by every dispatch of a ladder
        self._gates = machine.clock_gates(self.ladder)

    @classmethod
    def restore(
        cls,
        dispatch_id: str,
        spec: JobSpec,
        ladder: Ladder,
        *,
        history: Sequence[Step],
        jobs: Mapping[int, str],
        **options: bool | str,
    ) -> Dispatch:
        """Rebuild a dispatch from its journaled steps (replayed through the table's bookkeeping: machine.replay)
        and rung jobs; a rung without a journaled job may have been submitted before a crash: its token is looked up."""
        d = cls(dispatch_id, spec, ladder, **options)  # type: ignore[arg-type]
        machine.replay(d, list(history))
        d.effects = _IDLE
        d.see(jobs.get(d.rung_index), None)
        d.submit_uncertain = d.job_id is None and d.on_rung and bool(history)
        return d

    # ----------------------------------------------------------------- what the dispatch is
    @property
    def rung(self) -> Rung:
        """The rung the dispatch is on, or is leaving while PARKED or CANCELLED."""
        return self.ladder.rungs[self.rung_index]

    @property
    def on_rung(self) -> bool:
        """True while the dispatch is on a rung (SUBMITTED or RESUBMITTED)."""
        return self.state not in _FIXED

    @property
    def label(self) -> str:
        """The human label of the current state, e.g. ``RESUBMITTED(normal-eur)``."""
        return state_label(self.ladder, self.state)

    @property
    def is_final(self) -> bool:
        """True once nothing more will happen: ENDED, WITHDRAWN, REFUSED, a lane's end, or a pinned job gone."""
        return self.state in self.finals

    @property
    def paused(self) -> bool:
        """The ladder's clock is stopped (an outage, or time no driver watched)."""
        return self.paused_since is not None

    @property
    def calibrating(self) -> bool:
        """Does its rung's ``park_early`` read the cluster's workload (a chance that moves with time, not looks)?"""
        return policy.calibrates(self.park_early, last_rung=self.rung_index == len(self.ladder.rungs) - 1)

    def token(self) -> str:
        """The tag the current rung's job carries on the cluster, so a lost submit reply can be found again."""
        return self.ladder.token_of(self.id, self.rung_index)

    # ----------------------------------------------------------------- events in, decisions out
    def submit(self, now: float, *, may_change_rung: bool = True) -> Decision:
        """Submit the job on the first rung, once (``may_change_rung=False``: a refused QoS waits in CANCELLED)."""
        first = self.ladder.first
        if self.history or self.state != first.state_name or self.job_id is not None:
            raise TransitionNotAllowed(
                f"dispatch {self.id}: trigger 'submit' is not allowed from state {self.label} "
                f"(a dispatch is submitted once, on its first rung {first.label})"
            )
        self._begin(now, may_change_rung)
        machine.fire(self, Trigger.SUBMIT)
        return self._decide()

    def advance(
        self,
        look: Observation | None,
        now: float,
        *,
        may_change_rung: bool = True,
        may_leave_rung: bool = True,
        workload: Workload | None = None,
    ) -> Decision:
        """Take one (answered) look at the current job and take every step the table allows now. The two permits
        are the driver's per-tick bounds (a row refused only by one waits for a tick with room: waits_for_room);
        ``workload``: the cluster's jobs and GPUs (``park_early = "calibrated"``)."""
        if workload is not None:
            self.cluster_workload = workload
        q = self._quiet  # nothing new since a look that took no step, with no more permits: no row holds now either
        if (
            q is not None
            and may_change_rung <= q[1]
            and may_leave_rung <= q[2]
            and (
                look is None
                or (
                    look.phase is not _UNKNOWN
                    and look.__class__ is (m := q[0]).__class__ is Observation
                    and _LOOK(look) == _LOOK(m)  # look == m, for less: the fields it compares, read and compared in C
                )
            )
        ):
            if now < q[3]:
                return q[4]
            leave_gated, change_gated = self._gates.get(self.state, (False, False))
            if (leave_gated and not may_leave_rung) or (change_gated and not may_change_rung):
                self.waits_for_room = True  # its clock's time came, and the tick's bound on rung changes holds it back
                return q[4]  # (its wake time is q[3], which the clock reached: finite)
        self._begin(now, may_change_rung)
        self.may_leave_rung = may_leave_rung
        if not self.history:
            return self.submit(now, may_change_rung=may_change_rung)  # enqueued, a crash, or SLURM was down
        if look is not None and self.job_id is not None and look.job_id == self.job_id:
            self.see(self.job_id, looks.checked(self, look))
        until = self._settle()
        decision = self._decide(until)
        if not decision.effects:
            self._quiet = (self.look, may_change_rung, may_leave_rung, until, decision)  # its wake time: until's
        return decision

    def pause(self, now: float, since: float | None = None, *, why: str = "") -> Decision:
        """The controller does not answer, or no driver watched: stop the ladder's clock from ``since`` (default
        now; the step is journaled AT it), so neither walks a job past a free rung to a paid lane. ``why`` is the
        step's note. Nothing happens to a pinned, final, never-submitted or already paused dispatch."""
        self._begin(now, False)
        if self.paused or self.is_final or not self.history or self.pinned or self.state in FOLLOWED_STATES:
            return self._done(Decision((), None))
        self._pause(since, why)
        return self._done(Decision(tuple(self.effects), None))

    def fire(self, trigger: str, now: float, *, note: str = "") -> Decision:
        """Fire one trigger, out of the table's order: a told one (the handoff's steps), or by hand (tests, tools).
        Its guards must hold, else TransitionNotAllowed names them; ``note`` is the step's; the effects it then
        needs come back as with any event."""
        if trigger == Trigger.SUBMIT:
            return self.submit(now)
        if trigger not in lifecycle.TRIGGERS:
            raise TransitionNotAllowed(f"dispatch {self.id}: {trigger!r} is not a trigger; one of {lifecycle.TRIGGERS}")
        self._begin(now, True)
        self.note = note
        try:
            machine.fire(self, trigger)
        except TransitionNotAllowed:
            self.effects = _IDLE
            raise
        return self._decide()

    def hear(self, news: CommandEnd | LaneSaid, now: float) -> str | None:
        """The row what the driver heard asks (how its lane command ended, what its paid lane said: the paid tail's
        rows, asked in table order like a look), kept for ``fire``; None: nothing new."""
        return machine.heard(self, news, now)

    def recall(self, job_ids: Sequence[str], now: float, *, trigger: str = Trigger.RECALL) -> Decision:
        """A user's cancel (``recall``), or Ctrl-C while the first job was queued (``interrupt``): journal WITHDRAWN,
        then scancel ``job_ids`` (every job it got, or what reached the cluster), whatever their state."""
        self._begin(now, False)
        self.recalled = tuple(job_ids)
        machine.fire(self, trigger)
        return self._done(Decision(tuple(self.effects), None))

    def submitted(self, job_id: str, now: float, *, asked_at: float | None = None) -> Decision:
        """The submit's answer: the current rung's job is ``job_id``.

        ``asked_at``: when sbatch was called. An answer slower than ``SLOW_SUBMIT_SECONDS`` (a stalled controller)
        is an outage of its own: the rung's window stops from the call to the answer (a pause and a resume).
        """
        self._begin(now, self.may_change_rung)
        self.note = ""  # (an unreached cluster's note: it answered after all)
        self._attach(job_id, None)
        slow = asked_at is not None and now - asked_at > SLOW_SUBMIT_SECONDS
        if slow and self.on_rung and not self.pinned and not self.paused and asked_at >= self.history[-1].at:  # type: ignore[operator]
            self._pause(asked_at, f"sbatch took {now - asked_at:.0f} s to answer; the window counts from its answer")  # type: ignore[operator]
            machine.fire(self, Trigger.RESUME)
        return self._decide()

    def submit_unreached(self, why: str, now: float) -> Decision:
        """The current rung's sbatch never reached its cluster (ssh could not connect, every retry): nothing was
        queued. On a lane after fellows the rung's window runs on (the cluster is tried again each tick, and passed
        over when the window closes); ``why`` is the next step's note. The caller pauses a fellows rung instead."""
        self._begin(now, self.may_change_rung)
        self.submit_uncertain = False
        self.unreached = True
        self.note = f"{self.rung.lane} could not be reached ({why}); its window runs, the cluster is tried each poll"
        return self._decide(self._settle())

    def submit_refused(self, error: SubmitRejected, now: float) -> Decision:
        """The cluster refused the current rung's submit: nothing was queued. The rung is skipped (a refused QoS,
        or any refusal on a later rung); on the first rung a refusal of the job itself ends it REFUSED."""
        self._begin(now, self.may_change_rung)
        self.submit_uncertain = False
        if not isinstance(error, QosRejected) and self.rung_index == 0:
            raise error  # the job itself: nothing to walk (the driver ends it with ``refuse``)
        self.note = f"{self.rung.qos} refused by the cluster: {error}"
        self.refused = True
        return self._decide(self._settle())

    def refuse(self, error: SubmitRejected, now: float) -> Decision:
        """The first submit was refused for the job itself: journal it REFUSED, with SLURM's reason."""
        self._begin(now, False)
        self.note = str(error)
        machine.fire(self, Trigger.REFUSE)
        return self._done(Decision(tuple(self.effects), None))

    def found(self, look: Observation | None, now: float) -> Decision:
        """The token lookup's answer: the job an unanswered submit queued after all, or None (never queued)."""
        self._begin(now, self.may_change_rung)
        self.submit_uncertain = False
        if look is not None:
            self._attach(look.job_id, look)
            self.see(self.job_id, looks.checked(self, look))
        return self._decide(self._settle())

    def cancel_answered(self, look: Observation, now: float, *, may_change_rung: bool = True) -> Decision:
        """A cancel's answer for the parked job (GONE: the cancel proved it gone; STARTED: it started first)."""
        self._begin(now, may_change_rung)
        if look.job_id == self.job_id:
            self.see(self.job_id, look)
        return self._decide(self._settle())

    def move_answered(self, answer: bool | QosRejected, now: float) -> Decision:
        """The in-place move's answer: True (moved, same job id), False (no longer pending: the next look says),
        or the next QoS refused for this job (then the job is cancelled and resubmitted instead)."""
        self._begin(now, self.may_change_rung)
        if isinstance(answer, QosRejected):
            self.note = f"in-place move refused ({answer}); cancelling instead"
            self.in_place = False
        elif not answer:
            return self._done(Decision((), None))  # no longer pending: the next look says
        else:
            self.moved = True
            return self._decide(self._settle())
        return self._decide()

    # ----------------------------------------------------------------- the dispatch's own books
    def see(self, job_id: str | None, look: Observation | None) -> None:
        """Set the current job and the last look at it together; the first pending look at a job is what an
        outside change of its partition or time limit is read against."""
        if job_id != self.job_id:
            self.first_seen = None
        self.job_id = job_id
        self.look = look if look is not None and job_id is not None and look.job_id == job_id else None
        if self.first_seen is None and self.look is not None and self.look.phase is _PENDING:
            self.first_seen = (self.look.partition, self.look.time_limit_seconds)

    def _begin(self, now: float, may_change_rung: bool) -> None:
        self.now = now
        self.may_change_rung = may_change_rung
        self.may_leave_rung = True
        self.unreached = False
        self.effects = []
        self._quiet = None

    def _settle(self) -> float:
        """Take the first step of the current state whose guards hold, then look again, until none holds; return
        until when no row can hold with nothing new (lifecycle.first_row)."""
        for _ in range(3 * len(self.ladder.rungs) + 4):
            trigger, until, self.waits_for_room = machine.first_row(self)
            if trigger is None:
                if self.look is not None and self.look.phase is _UNKNOWN and self.unknown_since is not None:
                    until = min(until, self.unknown_since + LOST_AFTER_SECONDS)
                return until
            machine.fire(self, trigger)
        return self.now

    def _pause(self, since: float | None, why: str) -> None:
        """Journal the pause step AT ``since`` (default now), so a replay moves the window exactly as much."""
        now, self.now = self.now, min(self.now, since) if since is not None else self.now
        self.note = why
        try:
            machine.fire(self, Trigger.PAUSE)
        finally:
            self.now = now

    def _done(self, decision: Decision) -> Decision:
        self.effects = _IDLE
        return decision

    def _decide(self, until: float | None = None) -> Decision:
        """The effects the dispatch's state now needs (after its steps' journal effects), and when to look again."""
        out = self.effects
        if until is not None and not out and self.job_id is not None and self.state not in _FIXED:
            self.effects = _IDLE  # waiting on its rung with nothing to ask (the common case)
            return Decision((), None if math.isinf(until) else until)
        if self.on_rung and self.job_id is None and not self.refused and not self.unreached:
            out.append(
                FindByToken(self.id, self.token(), self.rung.lane) if self.submit_uncertain else self._submit_effect()
            )
        elif self.state == State.PARKED and self.job_id is not None and not (self.look and self.look.phase in _ENDED):
            if self.in_place and self._next_on_same_lane:
                if self.may_change_rung:
                    out.append(MoveQos(self.id, self.job_id, self.ladder.rungs[self.rung_index + 1].qos))
                else:
                    self.waits_for_room = True
            else:
                out.append(CancelIfPending(self.id, self.job_id))
        return self._done(Decision(tuple(out), self._wake_at(until)))

    def _wake_at(self, until: float | None = None) -> float | None:
        """When the dispatch wants its next look with nothing new: when a row of its state could start to hold
        (lifecycle.first_row; now, if one holds already); None: not before something new is seen."""
        if until is None:
            trigger, until, _ = machine.first_row(self)
            if trigger is not None:
                return self.now
        return None if math.isinf(until) else until

    def _submit_effect(self) -> Submit:
        deadline = None
        if self.controller_deadline and not self.pinned and self.spec.time_limit_seconds is not None:
            # Only with a time limit (SLURM drops a job that cannot END by it), rounded up to SLURM's whole minutes.
            deadline = self.deadline + 60 * math.ceil(self.spec.time_limit_seconds / 60)
        self.submit_uncertain = True  # until the answer comes: a lost answer is looked up by token, never resent
        return Submit(self.id, self.spec, self.rung.qos, self.token(), deadline, self.rung.lane)

    @property
    def _next_on_same_lane(self) -> bool:
        """Is there a next rung, on the same cluster (a job moves in place only within its cluster)?"""
        rungs = self.ladder.rungs
        return self.rung_index + 1 < len(rungs) and rungs[self.rung_index + 1].lane == rungs[self.rung_index].lane

    def _attach(self, job_id: str, look: Observation | None) -> None:
        self.effects.append(Attach(self.id, self.rung_index, job_id, self.now))
        self.see(job_id, look)
        self.submit_uncertain = False


def unended(dispatches: Iterable[Dispatch]) -> list[Dispatch]:
    """The dispatches not final (``is_final`` asked of each without a call: a tick scans every live one)."""
    return [d for d in dispatches if d.state not in d.finals]


def ended_of(dispatches: Iterable[Dispatch]) -> list[Dispatch]:
    """The dispatches that are final (as ``unended``, the other way)."""
    return [d for d in dispatches if d.state in d.finals]
