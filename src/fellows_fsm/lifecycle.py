"""The dispatch lifecycle: its states, the transition table with its guards, and the Dispatch model.

It decides and never does I/O itself: it reaches the cluster only through the Scheduler protocol and
persists only through the Recorder protocol, whose ``transition`` runs before every state change (so a
recorder that fails aborts the transition: write-ahead). Deadlines are data read from an injected clock.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, Protocol

import attrs
from transitions import Machine, MachineError

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config import Ladder, Rung
from fellows_fsm.errors import QosRejected, SubmitRejected, TransitionNotAllowed
from fellows_fsm.policy import park_early_reason
from fellows_fsm.scheduler import JobSpec, Observation, Phase, ReasonGroup, Scheduler

__all__ = [
    "CANCELLED",
    "FAILED_TO_GCP",
    "PARKED",
    "RUNNING",
    "WITHDRAWN",
    "Dispatch",
    "NullRecorder",
    "Recorder",
    "Step",
    "build_machine",
    "dispatch_token",
    "machine_definition",
    "state_label",
    "window_deadline",
]

log = logging.getLogger(__name__)

# The fixed states; the rung states (SUBMITTED_<qos>, RESUBMITTED_<qos>) come from the ladder.
PARKED = "PARKED"
CANCELLED = "CANCELLED"
RUNNING = "RUNNING"
FAILED_TO_GCP = "FAILED_TO_GCP"
WITHDRAWN = "WITHDRAWN"
"""Final: the job was cancelled by someone else (its owner, an admin) or by ``fellows-fsm cancel``."""
_FIXED_STATES = (PARKED, CANCELLED, RUNNING, FAILED_TO_GCP, WITHDRAWN)
LOST_AFTER_SECONDS = 120.0
"""A job unknown to squeue and sacct for this long is gone (a controller that restarted and lost it)."""

# The transition table, top to bottom in the order a dispatch lives it. RUNG stands for every rung
# state; NEXT_RUNG for the rung after the one the dispatch just left; SAME stays in the state (a step
# that is journaled but moves nowhere). Guards are questions asked of the Dispatch; edges that share a
# trigger and source are tried in order (an OR of their guards).
RUNG = "ANY_RUNG"
NEXT_RUNG = "NEXT_RUNG"
SAME = "SAME"
TABLE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # trigger    source     dest           guards
    ("start", RUNG, RUNNING, ("job_started",)),
    ("withdraw", RUNG, WITHDRAWN, ("job_ended_by_others",)),  # someone's scancel is a decision, not a rung
    ("hold", RUNG, SAME, ("job_held",)),  # held by its owner or an admin: waits, never walked away from
    ("release", RUNG, SAME, ("job_released",)),
    ("pause", RUNG, SAME, ("walks_ladder", "window_running")),  # the controller does not answer: the clock stops
    ("pause", PARKED, SAME, ("walks_ladder", "window_running")),
    ("pause", CANCELLED, SAME, ("walks_ladder", "window_running")),
    ("resume", RUNG, SAME, ("window_paused",)),
    ("resume", PARKED, SAME, ("window_paused",)),
    ("resume", CANCELLED, SAME, ("window_paused",)),
    ("park", RUNG, PARKED, ("walks_ladder", "job_not_held", "rung_expired")),
    ("park", RUNG, PARKED, ("walks_ladder", "rung_cannot_start")),
    ("park", RUNG, PARKED, ("walks_ladder", "job_not_held", "cannot_start_in_window")),  # [fellows] park_early
    ("drop", RUNG, CANCELLED, ("job_gone",)),
    ("start", PARKED, RUNNING, ("job_started",)),  # late start wins over the cancel
    ("cancel", PARKED, CANCELLED, ("job_gone",)),
    ("resubmit", CANCELLED, NEXT_RUNG, ("walks_ladder", "left_previous_rung")),
    ("move", PARKED, NEXT_RUNG, ("walks_ladder", "left_previous_rung")),  # in place: scontrol, same job
    ("give_up", CANCELLED, FAILED_TO_GCP, ("walks_ladder", "left_last_rung")),
)
TRIGGERS = (
    "submit",
    "start",
    "withdraw",
    "hold",
    "release",
    "pause",
    "resume",
    "park",
    "drop",
    "cancel",
    "resubmit",
    "move",
    "give_up",
)


def _left_rung_guard(rung: Rung) -> Callable[[Any], bool]:
    """A guard, named after ``rung``, that holds when the dispatch's job on that rung is gone."""

    def guard(event: Any) -> bool:
        return bool(event.model.rung_index == rung.index)

    guard.__name__ = f"left_{rung.state_name.split('_', 1)[1]}"
    return guard


def machine_definition(ladder: Ladder) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Expand TABLE over ``ladder``: the states (with human labels) and the transitions."""
    states: list[dict[str, Any]] = [{"name": r.state_name, "label": r.label} for r in ladder.rungs]
    states += [{"name": s, "label": s} for s in _FIXED_STATES]
    transitions: list[dict[str, Any]] = []
    for trigger, source, dest, guards in TABLE:
        if dest == NEXT_RUNG:
            for previous, following in zip(ladder.rungs, ladder.rungs[1:], strict=False):
                conditions = [g for g in guards if g != "left_previous_rung"] + [_left_rung_guard(previous)]
                transitions.append(
                    {
                        "trigger": trigger,
                        "source": source,
                        "dest": following.state_name,
                        "conditions": conditions,
                    }
                )
            continue
        if "left_last_rung" in guards:
            conditions = [g for g in guards if g != "left_last_rung"] + [_left_rung_guard(ladder.last)]
            transitions.append({"trigger": trigger, "source": source, "dest": dest, "conditions": conditions})
            continue
        sources = [r.state_name for r in ladder.rungs] if source == RUNG else [source]
        for src in sources:
            target = None if dest == SAME else dest  # None: an internal transition (journaled, no state change)
            transitions.append({"trigger": trigger, "source": src, "dest": target, "conditions": list(guards)})
    return states, transitions


class _DispatchMachine(Machine):
    """A Machine that binds nothing onto its models: Dispatch has a typed method for every trigger."""

    def _checked_assignment(self, model: object, name: str, func: object) -> None:
        return None


@cache
def build_machine(ladder: Ladder) -> Machine:
    """The (shared, cached) machine for a ladder; models are passed per event, never registered."""
    states, transitions = machine_definition(ladder)
    return _DispatchMachine(
        model=None,
        states=[s["name"] for s in states],  # labels are for diagrams (GraphMachine) only
        transitions=transitions,
        initial=ladder.first.state_name,
        auto_transitions=False,
        send_event=True,
        before_state_change=["record_step"],
    )


def state_label(ladder: Ladder, state: str) -> str:
    """The human label of a state name, e.g. ``RESUBMITTED(normal-eur)`` for ``RESUBMITTED_normal_eur``."""
    for rung in ladder.rungs:
        if rung.state_name == state:
            return rung.label
    return state


def dispatch_token(dispatch_id: str, rung_index: int) -> str:
    """The tag (sbatch --comment) of a dispatch's job on one rung: ``fsm-<dispatch id>-r<rung index>``."""
    return f"fsm-{dispatch_id}-r{rung_index}"


EARLY_PARK = "park_early="
"""How the note of a park step decided by the ``park_early`` policy begins (the journal's mark of an early park)."""


def window_deadline(previous_deadline: float, entered_at: float, rung: Rung, *, carried: bool = False) -> float:
    """When a later rung's window closes: it opens when the previous one closed, or on entry if earlier.

    ``carried``: the previous rung was left early by the ``park_early`` policy, and the unused rest of its window
    moves on with the job: this window opens when the previous one would have closed, so every later window
    closes where it would have had the job waited, and the worst case before the paid lane is unchanged.
    """
    if carried:
        return previous_deadline + rung.park_cap_seconds
    return min(previous_deadline, entered_at) + rung.park_cap_seconds


@attrs.frozen
class Step:
    """One transition of one dispatch, as it is journaled before it takes effect."""

    at: float
    source: str
    """The state left; empty for the first submission."""
    dest: str
    trigger: str
    rung_index: int
    """The rung the dispatch is on (or, in PARKED/CANCELLED, the rung it is leaving) after the step."""
    qos: str
    job_id: str | None
    reason: str | None = None
    note: str = ""


class Recorder(Protocol):
    """Where a dispatch's steps are persisted (the journal); called before each effect it announces."""

    def transition(self, dispatch: Dispatch, step: Step) -> None:
        """Persist ``step`` before the state changes; raising here aborts the transition."""
        ...

    def attached(self, dispatch: Dispatch, job_id: str) -> None:
        """Persist that the current rung's job is ``job_id`` (called right after the submit returns)."""
        ...


class NullRecorder:
    """A Recorder that keeps nothing beyond the Dispatch's own history."""

    def transition(self, dispatch: Dispatch, step: Step) -> None:
        """Keep nothing."""

    def attached(self, dispatch: Dispatch, job_id: str) -> None:
        """Keep nothing."""


# Not frozen and without slots: transitions sets ``state`` on the model and reads guards from it.
@attrs.define(slots=False, eq=False)
class Dispatch:
    """One job's way through the ladder: the model the machine drives.

    Deadlines are data. Rung windows follow each other: a rung's window opens when the previous rung's
    window closed (or when the rung was entered, if that was earlier, e.g. after a never-fits skip), so
    the time to reach the last rung's end never exceeds the ladder's worst case by more than one poll.
    """

    id: str
    spec: JobSpec
    ladder: Ladder
    scheduler: Scheduler
    clock: Clock = attrs.field(factory=SystemClock)
    recorder: Recorder = attrs.field(factory=NullRecorder)
    pinned: bool = False
    """A pinned dispatch stays on the first rung: it never parks, walks, or gives up."""
    controller_deadline: bool = False
    """Ask SLURM to drop a rung's job itself (sbatch --deadline) if it cannot start within the window."""
    in_place: bool = False
    """Change rung by moving the pending job to the next QoS (scontrol, same job id) instead of cancel and
    resubmit; slurmctld refuses the move once the job runs, and a refused QoS falls back to cancel."""
    park_early: str = "off"
    """When to leave a rung before its window closes (``[fellows] park_early``; see policy.py); the window still
    bounds every rung. The library default is "off" (wait out every window); the config's default is chosen
    from the sweep."""
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
    history: list[Step] = attrs.field(init=False, factory=list)
    note: str = attrs.field(init=False, default="")
    submit_uncertain: bool = attrs.field(init=False, default=False)
    """A submit may have reached the cluster without its reply: look the token up before submitting again."""
    held: bool = attrs.field(init=False, default=False)
    """The current job was last seen held (JobHeldUser/JobHeldAdmin): its window does not walk it away."""
    paused: bool = attrs.field(init=False, default=False)
    """The controller stopped answering: the ladder's clock is stopped until it answers again."""
    paused_since: float | None = attrs.field(init=False, default=None)
    unknown_since: float | None = attrs.field(init=False, default=None)
    """Since when the current job has been unknown to the scheduler (None while it is known)."""
    left_early: bool = attrs.field(init=False, default=False)
    """The rung being left was parked early by ``park_early``: the rest of its window carries to the next rung."""

    def __attrs_post_init__(self) -> None:
        self.state = self.ladder.first.state_name
        self.created_at = self.clock.now()

    @classmethod
    def restore(
        cls,
        dispatch_id: str,
        spec: JobSpec,
        ladder: Ladder,
        scheduler: Scheduler,
        *,
        history: Sequence[Step],
        jobs: Mapping[int, str],
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        pinned: bool = False,
        controller_deadline: bool = False,
        in_place: bool = False,
        park_early: str = "off",
        park_early_last_rung: bool = False,
    ) -> Dispatch:
        """Rebuild a dispatch from its journaled steps and rung jobs, exactly where it stood.

        Deadlines are recomputed from the steps' wall-clock times, so the remaining budget is what it
        was. A rung without a journaled job may have been submitted just before a crash: the next step
        looks its token up before submitting again.
        """
        d = cls(
            dispatch_id,
            spec,
            ladder,
            scheduler,
            clock or SystemClock(),
            recorder or NullRecorder(),
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
            elif step.trigger in ("resubmit", "move"):
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
            d.held = step.trigger == "hold" or (d.held and step.trigger not in ("release", "resubmit", "move"))
            d.paused = step.trigger == "pause" or (d.paused and step.trigger != "resume")
        last = history[-1]
        d.state = last.dest
        d.rung_index = last.rung_index
        d.job_id = jobs.get(d.rung_index)
        d.submit_uncertain = d.job_id is None and d.on_rung
        return d

    # ----------------------------------------------------------------- what the dispatch is
    @property
    def machine(self) -> Machine:
        """The machine that drives this dispatch (shared by every dispatch on the same ladder)."""
        return build_machine(self.ladder)

    @property
    def rung(self) -> Rung:
        """The rung the dispatch is on, or is leaving while PARKED or CANCELLED."""
        return self.ladder.rungs[self.rung_index]

    @property
    def label(self) -> str:
        """The human label of the current state, e.g. ``RESUBMITTED(normal-eur)``."""
        return state_label(self.ladder, self.state)

    @property
    def on_rung(self) -> bool:
        """True while the dispatch is on a rung (SUBMITTED or RESUBMITTED)."""
        return self.state not in _FIXED_STATES

    @property
    def is_final(self) -> bool:
        """True once nothing more will happen: RUNNING, FAILED_TO_GCP, or a pinned dispatch's job gone."""
        if self.state in (RUNNING, FAILED_TO_GCP, WITHDRAWN):
            return True
        return self.state == CANCELLED and self.pinned

    def token(self) -> str:
        """The tag the current rung's job carries on the cluster, so a lost submit reply can be found again."""
        return dispatch_token(self.id, self.rung_index)

    # ----------------------------------------------------------------- guards (questions, no side effects)
    def walks_ladder(self, event: Any = None) -> bool:
        """Is this dispatch allowed to leave its first rung at all (not pinned)?"""
        return not self.pinned

    def rung_expired(self, event: Any = None) -> bool:
        """Has the current rung's window closed (now >= its deadline)?"""
        return self.clock.now() >= self.deadline

    def rung_cannot_start(self, event: Any = None) -> bool:
        """Does the latest pending reason prove this rung can never start the job?"""
        obs = self.observation
        return (
            obs is not None
            and obs.job_id == self.job_id
            and obs.phase is Phase.PENDING
            and obs.reason_group in (ReasonGroup.NEVER_FITS, ReasonGroup.INVALID)
        )

    def cannot_start_in_window(self, event: Any = None) -> bool:
        """Does the ``park_early`` policy say the job cannot start on this rung before its window closes?"""
        return self.early_park_reason() is not None

    def early_park_reason(self) -> str | None:
        """The ``park_early`` policy's reason to leave the current rung now (policy.py), or None to wait."""
        last = self.rung_index == len(self.ladder.rungs) - 1
        if last and not self.park_early_last_rung:
            return None
        obs = self._current()
        if obs is not None and obs.qos is not None and obs.qos != self.rung.qos:
            return None  # a look taken before an in-place move says nothing about this rung
        return park_early_reason(self.park_early, obs, self.deadline, last_rung=last)

    def job_started(self, event: Any = None) -> bool:
        """Was the current job seen running (or having run)?"""
        obs = self.observation
        return obs is not None and obs.job_id == self.job_id and obs.phase is Phase.STARTED

    def job_ended_by_others(self, event: Any = None) -> bool:
        """Was the current job cancelled outside the router, or dropped while someone held it?"""
        obs = self._current()
        return obs is not None and obs.phase is Phase.GONE and (obs.ended_by_others or self.held)

    def job_held(self, event: Any = None) -> bool:
        """Is the current job newly seen held by its owner or an admin?"""
        obs = self._current()
        return not self.held and obs is not None and obs.phase is Phase.PENDING and obs.reason_group is ReasonGroup.HELD

    def job_released(self, event: Any = None) -> bool:
        """Was the current job held, and is it now seen pending without the hold (or started)?"""
        obs = self._current()
        return (
            self.held
            and obs is not None
            and obs.phase in (Phase.PENDING, Phase.STARTED)
            and obs.reason_group is not ReasonGroup.HELD
        )

    def window_running(self, event: Any = None) -> bool:
        """Is the ladder's clock running for this dispatch (not stopped by a controller outage)?"""
        return not self.paused

    def window_paused(self, event: Any = None) -> bool:
        """Is the ladder's clock stopped by a controller outage?"""
        return self.paused

    def job_not_held(self, event: Any = None) -> bool:
        """Is the current job free of any hold (so its window may walk it to the next rung)?"""
        return not self.held

    def _current(self) -> Observation | None:
        obs = self.observation
        return obs if obs is not None and obs.job_id == self.job_id else None

    def job_gone(self, event: Any = None) -> bool:
        """Is the current job confirmed gone without ever starting (or was it never queued)?"""
        if self.job_id is None:
            return True
        obs = self.observation
        return obs is not None and obs.job_id == self.job_id and obs.phase is Phase.GONE

    # ----------------------------------------------------------------- the journal hook
    def record_step(self, event: Any) -> None:
        """Journal the transition about to happen (before_state_change: a failure aborts it)."""
        dest = event.transition.dest or self.state  # an internal transition stays where it is
        if event.event.name == "resubmit":
            # The step announces the next rung's submit; its job id is journaled once sbatch answers.
            self._record("resubmit", self.state, dest, self.rung_index + 1, job_id=None)
        elif event.event.name == "move":
            self._record("move", self.state, dest, self.rung_index + 1, job_id=self.job_id)
        else:
            self._record(event.event.name, self.state, dest, self.rung_index, job_id=self.job_id)

    def _record(self, trigger: str, source: str, dest: str, rung_index: int, *, job_id: str | None) -> None:
        obs = self.observation
        reason = obs.reason if obs is not None and obs.job_id == self.job_id else None
        step = Step(
            at=self.clock.now(),
            source=source,
            dest=dest,
            trigger=trigger,
            rung_index=rung_index,
            qos=self.ladder.rungs[rung_index].qos,
            job_id=job_id,
            reason=reason,
            note=self.note,
        )
        self.recorder.transition(self, step)
        self.history.append(step)
        self.note = ""

    # ----------------------------------------------------------------- triggers (typed, one per verb)
    def _fire(self, trigger: str) -> None:
        """Fire ``trigger``; a trigger the state or the guards forbid raises TransitionNotAllowed."""
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

    def submit(self) -> None:
        """Submit the job on the first rung; allowed once, and only on the first rung."""
        first = self.ladder.first
        if self.history or self.state != first.state_name or self.job_id is not None:
            raise TransitionNotAllowed(
                f"dispatch {self.id}: trigger 'submit' is not allowed from state {self.label} "
                f"(a dispatch is submitted once, on its first rung {first.label})"
            )
        now = self.clock.now()
        self.entered_at = now
        self.deadline = now + first.park_cap_seconds
        self._record("submit", "", first.state_name, 0, job_id=None)
        self._submit_current_rung()

    def start(self) -> None:
        """The job was seen running: the dispatch is RUNNING, whatever rung it was on."""
        self._fire("start")

    def withdraw(self) -> None:
        """The job was cancelled by someone else (or dropped while held): respect it, walk no further."""
        obs = self._current()
        state = obs.state if obs is not None else "gone"
        if self.held and (obs is None or not obs.ended_by_others):
            self.note = f"job {self.job_id} ended ({state}) while held; a hold is someone's decision: not resubmitted"
        else:
            self.note = f"job {self.job_id} was cancelled outside fellows-fsm ({state}); not resubmitted"
        self._fire("withdraw")

    def hold(self) -> None:
        """The job is held by its owner or an admin: it waits on its rung, however long its window."""
        self._fire("hold")
        self.held = True

    def pause(self, since: float | None = None) -> None:
        """The controller does not answer: stop the ladder's clock, so an outage never walks a job past a free
        rung to a paid lane (every window, this one and the later ones, resumes where it stood).

        ``since`` is when the controller last answered (the outage began after it); it defaults to now. A router
        restarted during the outage counts it from this step instead.
        """
        now = self.clock.now()
        self.paused_since = min(now, since) if since is not None else now
        self.note = f"SLURM has not answered since {time.strftime('%H:%M:%S', time.localtime(self.paused_since))}"
        self._fire("pause")
        self.paused = True

    def resume(self) -> None:
        """The controller answers again: the clock runs on, every window later by the outage's length."""
        self._fire("resume")
        self.paused = False
        self._restart_clock(self.paused_since, "pause")
        self.paused_since = None

    def release(self) -> None:
        """The hold was lifted: the rung's window resumes where the hold stopped it (time held is not counted,
        so a long hold never makes the later rungs' windows close before they open)."""
        self._fire("release")
        self.held = False
        self._restart_clock(None, "hold")

    def _restart_clock(self, stopped_at: float | None, stopped_by: str) -> None:
        """Move the deadline later by how long the clock stood: from ``stopped_at`` (else the latest
        ``stopped_by`` step) to the step just journaled."""
        if stopped_at is None:
            stopped_at = next((st.at for st in reversed(self.history) if st.trigger == stopped_by), self.history[-1].at)
        self.deadline += self.history[-1].at - stopped_at

    def park(self) -> None:
        """Stop waiting on the current rung (its window closed, it can never start the job, or the park_early
        policy says it cannot start it in time: then the policy's reason is the step's note)."""
        if not self.rung_expired() and not self.rung_cannot_start() and not self.held:
            early = self.early_park_reason()
            if early is not None:
                self.note = f"{EARLY_PARK}{self.park_early}: {early}"
        self._fire("park")
        self.left_early = self.note == "" and self.history[-1].note.startswith(EARLY_PARK)

    def drop(self) -> None:
        """The rung's job is gone without starting (cancelled by others, deadline, refused QoS)."""
        self._fire("drop")

    def cancel(self) -> None:
        """The parked job's cancel is confirmed: it is gone and never started."""
        self._fire("cancel")

    def resubmit(self) -> None:
        """Submit on the next rung, after the previous rung's job is confirmed gone."""
        self._enter_next_rung("resubmit")
        self.job_id = None
        self.observation = None
        if self.rung_expired():
            # The walk ran late (an outage, or caps shorter than the poll): this rung's window closed
            # before it opened. Queue nothing; the next step parks it, so GCP is never later than promised.
            self.note = "window closed before it opened; rung passed over without a job"
            return
        self._submit_current_rung()

    def move(self) -> None:
        """The parked job was moved in place to the next rung's QoS (same job id); the new window opens."""
        self._enter_next_rung("move")
        self.observation = None  # the last look was at the previous rung: the next poll looks at this one
        assert self.job_id is not None
        self.recorder.attached(self, self.job_id)

    def _enter_next_rung(self, trigger: str) -> None:
        """Fire ``trigger`` onto the next rung and open its window (chained to the previous one)."""
        previous_deadline = self.deadline
        self._fire(trigger)
        self.rung_index += 1
        now = self.clock.now()
        self.entered_at = now
        self.deadline = window_deadline(previous_deadline, now, self.rung, carried=self.left_early)
        self.left_early = False

    def give_up(self) -> None:
        """The last rung's job is confirmed gone: hand the dispatch to the next lane (GCP)."""
        self._fire("give_up")

    # ----------------------------------------------------------------- the port side of a rung
    def _submit_current_rung(self) -> None:
        """Queue the current rung's job through the port (looking for a lost submit first)."""
        rung = self.rung
        if self._find_lost_submit():
            return
        deadline = None
        if self.controller_deadline and not self.pinned and self.spec.time_limit_seconds is not None:
            # Only with a time limit: SLURM drops a job that cannot END by the deadline, so without one
            # (the partition's limit, possibly INFINITE) it could drop or truncate a job that would start.
            # SLURM keeps time limits in whole minutes (--time rounds up): judged against the rounded limit,
            # a deadline that counted the raw seconds would drop the job the moment it is queued.
            deadline = self.deadline + 60 * math.ceil(self.spec.time_limit_seconds / 60)
        self.submit_uncertain = True
        try:
            job_id = self.scheduler.submit(self.spec, qos=rung.qos, token=self.token(), deadline=deadline)
        except SubmitRejected as exc:
            self.submit_uncertain = False  # a refusal is an answer: nothing was queued
            if not isinstance(exc, QosRejected) and self.rung_index == 0:
                raise  # the job itself is refused (bad script, impossible request): nothing to walk
            # This rung cannot take the job (QoS refused, or a later rung refuses it): skip it, not wait.
            self.note = f"{rung.qos} refused by the cluster: {exc}"
            self.drop()
            return
        self._attach(job_id, None)

    def _find_lost_submit(self) -> bool:
        """After a submit whose outcome is unknown, attach the job the token finds; True if found."""
        if not self.submit_uncertain:
            return False
        found = self.scheduler.find_by_token(self.token())
        if found is None:
            return False
        log.info("dispatch %s: found job %s by token %s", self.id, found.job_id, self.token())
        self._attach(found.job_id, found)
        return True

    def _attach(self, job_id: str, observation: Observation | None) -> None:
        self.recorder.attached(self, job_id)
        self.job_id = job_id
        self.observation = observation
        self.submit_uncertain = False

    def _move_in_place(self) -> bool:
        """Ask slurmctld to move the pending job to the next QoS; True if it moved (a compare-and-set)."""
        assert self.job_id is not None
        following = self.ladder.rungs[self.rung_index + 1]
        try:
            moved = self.scheduler.change_qos(self.job_id, following.qos)
        except QosRejected as exc:
            # The next QoS is refused for this job: fall back to cancel and resubmit (which skips it).
            self.note = f"in-place move refused ({exc}); cancelling instead"
            self.in_place = False
            return True
        if not moved:
            return False  # no longer pending: it started (the late start wins) or ended; the next look says
        self.move()
        return True

    # ----------------------------------------------------------------- one look, every allowed move
    def advance(self, observation: Observation | None, *, may_change_rung: bool = True) -> None:
        """Take one observation of the current job and fire every move the guards allow now.

        ``may_change_rung=False`` lets the router bound how many dispatches cancel and resubmit in one
        tick: the dispatch may still start or park, but waits in PARKED or CANCELLED for a later tick.
        """
        if (
            self.job_id is not None
            and (observation is None or (observation == self.observation and observation.phase is not Phase.UNKNOWN))
            and self.on_rung
            and not self.paused
            and self.clock.now() < self.deadline
        ):
            return  # nothing new and the window still open: every guard answers as it did last time
        if observation is not None and observation.job_id == self.job_id:
            self.observation = self._checked(observation)
        # Each step moves one state or stops; a ladder of n rungs needs at most 3n + 1 steps.
        for _ in range(3 * len(self.ladder.rungs) + 1):
            if not self._step(may_change_rung):
                return

    def _checked(self, obs: Observation) -> Observation:
        """``obs`` as it bears on this dispatch: a stranger's job under our id, or a job unknown for too long, is
        our job gone (a controller that restarted lost it and reused its id); nothing else is changed."""
        prefix = dispatch_token(self.id, 0)[:-1]
        if obs.token is not None and not obs.token.startswith(prefix):
            self.note = f"job id {obs.job_id} now belongs to another job ({obs.token}); ours was lost by the controller"
            return Observation(obs.job_id, Phase.GONE, state="LOST")
        if obs.phase is not Phase.UNKNOWN:
            self.unknown_since = None
            return obs
        now = self.clock.now()
        if self.unknown_since is None:
            self.unknown_since = now
        if now - self.unknown_since < LOST_AFTER_SECONDS:
            return obs
        self.note = f"job {obs.job_id} unknown to squeue and sacct for {now - self.unknown_since:.0f} s; taken as lost"
        return Observation(obs.job_id, Phase.GONE, state="LOST")

    def _step(self, may_change_rung: bool) -> bool:
        """Fire the one move the guards allow now; True if another may follow without a new observation."""
        if self.is_final:
            return False
        if self.paused:
            self.resume()  # a step is taken only on a tick whose observation the controller answered
            return True
        if self.on_rung:
            if not self.history:
                self.submit()  # journaled but never submitted (a crash, or SLURM down at dispatch time)
                return False
            if self.job_id is None:
                if self._find_lost_submit():
                    return True
                if self.walks_ladder() and self.rung_expired():
                    self.park()  # its window closed before a job was queued: nothing to wait for
                    return True
                self._submit_current_rung()
                return self.state == CANCELLED
            if self.job_started():
                self.start()
                return False
            if self.job_ended_by_others():
                self.withdraw()
                return False
            if self.job_gone():
                self.drop()
                return True
            if self.job_held():
                self.hold()
                return False
            if self.job_released():
                self.release()
                return True
            if self.walks_ladder() and (
                (self.job_not_held() and (self.rung_expired() or self.cannot_start_in_window()))
                or self.rung_cannot_start()
            ):
                self.park()
                return True
            return False
        if self.state == PARKED:
            if self.job_started():
                self.start()
                return False
            if self.job_gone():
                self.cancel()  # confirmed gone (e.g. by the router's batched cancel and read-back)
                return True
            if not may_change_rung:
                return False
            assert self.job_id is not None  # job_gone() holds when there is no job
            if self.in_place and self.rung_index + 1 < len(self.ladder.rungs):
                return self._move_in_place()
            self.observation = self.scheduler.cancel_if_pending([self.job_id])[self.job_id]
            if self.job_started():
                self.start()
                return False
            if not self.job_gone():
                return False  # not confirmed gone: never a second live job; try again next tick
            self.cancel()
            return True
        if self.state == CANCELLED and self.walks_ladder() and may_change_rung:
            if self.rung_index + 1 < len(self.ladder.rungs):
                self.resubmit()
                return True
            self.give_up()
        return False
