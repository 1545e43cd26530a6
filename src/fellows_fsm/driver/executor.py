"""The one doer: runs the effects the core decides, for every dispatch of a tick, batched.

Each dispatch's journal effects are committed before the port call they announce (write-ahead); the answer goes
back to the dispatch, whose next decision follows. Per tick: the steps taken on the fresh observation share one
journal transaction, at most ``max_changes`` dispatches change rung, and every parked job of the tick is cancelled in
ONE call (the only cancel path: a cancel the port proves lets its dispatch resubmit in the same tick; any other
is read back by the next tick's observe). It decides nothing itself and prints nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.core.dispatch import SLOW_SUBMIT_SECONDS, Dispatch, unended
from fellows_fsm.core.effects import (
    Attach,
    CancelIfPending,
    CancelJobs,
    Command,
    CommandEnd,
    Decision,
    DeletePaid,
    Effect,
    FindByToken,
    HandOff,
    MoveQos,
    Record,
    Submit,
)
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.paid import PaidMark
from fellows_fsm.core.vocab import State, Trigger
from fellows_fsm.driver.clusters import Clusters
from fellows_fsm.errors import QosRejected, SchedulerError, SchedulerUnreachable, SlurmCommandMissing, SubmitRejected
from fellows_fsm.scheduler.port import JobSpec, Observation, Phase, Scheduler, Workload

if TYPE_CHECKING:
    from fellows_fsm.driver.handoffs import Handoffs
    from fellows_fsm.lanes.base import HandoffLane

__all__ = ["FIRST_SUBMITS_PER_TICK", "Executor", "NullRecorder", "Recorder", "TickOutcome"]

log = logging.getLogger(__name__)

_ENTERED = frozenset({"resubmit", "move", "give_up"})
"""The steps that complete a rung change (onto the next rung, or off the ladder)."""


class Recorder(Protocol):
    """Where the core's journal effects go (the journal): committed before the effect they announce."""

    def write(self, effects: Sequence[Record | Attach]) -> None:
        """Persist one decision's steps (and the dispatch's new state) and job ids, together."""
        ...

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Group the writes made inside it in one transaction (a port call they announce runs after it commits)."""
        ...


class NullRecorder:
    """A Recorder that keeps nothing (the dispatches keep their own history)."""

    def write(self, effects: Sequence[Record | Attach]) -> None:
        """Keep nothing."""

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """No transaction to group."""
        yield


FIRST_SUBMITS_PER_TICK = 20
"""At most this many first submits of new dispatches a tick (or a wake-up's turn): 2 s of sbatch calls at the
default pace (slurm/pace.py), so a burst of 1,000 submits never holds a poll (or a cancel) up for long; the rest
follow in the next turns, at once (``Executor.unsent``)."""


STEPS_PER_COMMIT = 20
"""A tick's rung changes are journaled this many to a transaction, each group committed before its sbatch calls
(``Executor._run_all``): one commit (its pages written to the WAL once) instead of one per change, and a step's time
at most 2 s of sbatch calls (at the default pace, slurm/pace.py) before its own call."""


@attrs.frozen
class TickOutcome:
    """What one tick did to the dispatches it was given."""

    rung_changes: int
    deferred: int
    """Dispatches that wanted to change rung (or have their parked job cancelled) but waited for a tick with room
    (the per-tick bound on rung changes)."""
    handoffs: tuple[str, ...]
    """Dispatches that parked out of the whole ladder this tick: hand them to their fallback lane."""
    rejected: tuple[tuple[str, SubmitRejected], ...]
    """Dispatches whose first submit the cluster refused (nothing queued): end them as refused."""
    failures: tuple[str, ...]
    """One line per dispatch whose port call failed this tick (it retries on the next)."""


class Executor:
    """Runs every dispatch's decisions through one port and one recorder."""

    def __init__(
        self,
        scheduler: Scheduler,
        recorder: Recorder | None = None,
        clock: Clock | None = None,
        handoffs: Handoffs | None = None,
        delete_paid: Callable[[str], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.clusters = Clusters.of(scheduler)
        """Every SLURM lane's port (one, fellows', unless the config has more): each call goes to its job's cluster."""
        self.handoffs = handoffs
        """The lane commands (the router's): the driver is the one that starts them."""
        self.recorder: Recorder = recorder or NullRecorder()
        self.clock: Clock = clock or SystemClock()
        self._handoffs: list[str] = []
        self._rejected: list[tuple[str, SubmitRejected]] = []
        self._failures: list[str] = []
        self._cancels: dict[str, tuple[Dispatch, CancelIfPending]] = {}
        self._changes = 0
        self.looked_up: set[str] = set()
        """Dispatches whose lost submit was looked up by token: a late job may carry it (swept when they end)."""
        self.unsent = 0
        """New dispatches the last tick left for the next turn (``FIRST_SUBMITS_PER_TICK``): taken at once."""
        self.delete_paid = delete_paid
        """Deletes a dispatch's paid job (the router's paid follower), after the step that asks it is journaled."""
        self._attaches: list[Attach] | None = None
        """During a tick, the job ids answered by this tick's submits: journaled together when it ends (a job whose
        id is lost to a crash before that is found again by its token)."""

    # ----------------------------------------------------------------- one dispatch, outside a tick
    def start(self, d: Dispatch) -> None:
        """Submit a new dispatch on its first rung now; SubmitRejected and SchedulerError reach the caller."""
        self._run(d, d.submit(self.clock.now(), may_change_rung=False))

    def pause(self, dispatches: Iterable[Dispatch], last_answer: float, *, why: str = "") -> None:
        """The controller did not answer this tick (or no driver watched since ``last_answer``): stop every walking
        dispatch's clock from then (one transaction); the next answered look resumes it."""
        now = self.clock.now()
        with self.recorder.batch():
            for d in dispatches:
                if d.history and not d.paused:
                    self._journal(d, d.pause(now, since=max(last_answer, d.history[-1].at), why=why))

    def recall(self, d: Dispatch | LaneDispatch, job_ids: Sequence[str]) -> None:
        """A user's cancel: journal the dispatch WITHDRAWN, then scancel every job it got (the recall row); one
        pinned straight to a command lane, before its command ran, has no job."""
        if isinstance(d, LaneDispatch):
            self._lane_effects(d.recall(job_ids, self.clock.now()).effects)
            return
        self._run(d, d.recall(job_ids, self.clock.now()))

    def lane_look(self, d: LaneDispatch) -> None:
        """A lane-pinned dispatch asks the rows no event fires (the budget's, before its command): journal its step."""
        self._lane_effects(d.look_again(self.clock.now()).effects)

    def _lane_effects(self, effects: Sequence[Effect]) -> None:
        """A lane-pinned dispatch's step: journal it, then delete its paid job if it asks (it has no SLURM job)."""
        self.recorder.write([e for e in effects if isinstance(e, Record)])
        for effect in effects:
            if isinstance(effect, DeletePaid):
                self._delete_paid(effect.dispatch_id)

    def _delete_paid(self, dispatch_id: str) -> None:
        assert self.delete_paid is not None, "a driver that follows paid jobs deletes them"
        self.delete_paid(dispatch_id)

    def interrupt(self, d: Dispatch, job_id: str | None) -> None:
        """Ctrl-C while ``d``'s first job was being queued: journal it WITHDRAWN, then scancel what was queued."""
        self._run(d, d.recall([job_id] if job_id is not None else [], self.clock.now(), trigger=Trigger.INTERRUPT))

    def start_lane(self, dispatch_id: str, lane_name: str, spec: JobSpec, lane: HandoffLane | None = None) -> None:
        """Start a lane's command for a dispatch, exactly once (journaled before it starts; never waited for)."""
        assert self.handoffs is not None, "a driver without handoffs starts no lane"
        self.handoffs.start(dispatch_id, lane_name, spec, lane=lane)

    def hand_off(self, d: Dispatch, lane_name: str | None, lane: HandoffLane | None = None) -> None:
        """After the ladder: start the fallback lane's command, its hand_off step (HANDING_OFF) journaled first with
        its argv (``command_step``, told by the handoffs); with no lane, journal NO_LANE_LEFT (the no_lane row). A
        dispatch already HANDING_OFF (a restart) is followed."""
        if lane_name is None:
            self._run(d, d.fire(Trigger.NO_LANE, self.clock.now()))
            return
        self.start_lane(d.id, lane_name, d.spec, lane)

    def command_step(
        self,
        d: Dispatch | LaneDispatch,
        trigger: str | CommandEnd,
        note: str,
        command: Command,
        paid: PaidMark | None = None,
    ) -> None:
        """A lane command's step (hand_off, re_run, or how it ended: the row its dispatch's table picks for the
        CommandEnd, handed_off, handoff_failed, handoff_unknown, paid or paid_unknown): fire its row on the dispatch
        and journal it with the command's argv or end (and its paid run's facts), in one transaction, before the
        command is started (again)."""
        now = self.clock.now()
        if isinstance(trigger, CommandEnd):
            trigger = d.hear(trigger, now) or f"no row for a command that ended {trigger.status}"
        decision = d.fire(trigger, now, note=note)
        effects = tuple(_with_paid(_with_command(e, command), paid) for e in decision.effects)
        if isinstance(d, LaneDispatch):
            self._lane_effects(effects)
            return
        self._run(d, attrs.evolve(decision, effects=effects))

    def paid_step(self, d: Dispatch | LaneDispatch, trigger: str, note: str, paid: PaidMark | None = None) -> None:
        """A paid run's step (it started, ended, was deleted outside, sat queued too long): fire its row, journal it
        with the run's facts, then delete the paid job if the row asks (paid_stuck)."""
        decision = d.fire(trigger, self.clock.now(), note=note)
        effects = tuple(_with_paid(e, paid) for e in decision.effects)
        if isinstance(d, LaneDispatch):
            self._lane_effects(effects)
            return
        self._run(d, attrs.evolve(decision, effects=effects))

    def cancel_strays(self, job_ids: Sequence[str]) -> None:
        """scancel jobs a dispatch already journaled WITHDRAWN still has (a cancel run again, or a submit that
        landed after its Ctrl-C): nothing to journal, their dispatch is final."""
        if job_ids:
            self.clusters.cancel(list(job_ids))

    def cancel_pending_strays(self, job_ids: Sequence[str]) -> None:
        """Cancel, only while pending, jobs carrying a dispatch's token that are not its job (strays.py): nothing
        to journal (they were never the dispatch's); one that started first is left running."""
        if job_ids:
            self.clusters.cancel_if_pending(list(job_ids), read_back=False)

    # ----------------------------------------------------------------- a tick
    def tick(
        self,
        dispatches: Iterable[Dispatch],
        observations: Mapping[str, Observation],
        max_changes: int,
        *,
        max_parks: int | None = None,
        workload: Workload | Mapping[str, Workload] | None = None,
    ) -> TickOutcome:
        """Advance every dispatch on this tick's observations and run what they need, batched.

        1. Every dispatch with a job moves on its fresh observation (starts, withdrawals, holds, parks, confirmed
           cancels), in one journal transaction: none of these announces a port call. At most ``max_parks``
           (default: ``max_changes``) dispatches park (a rung change begun); the others wait on their rung for a tick
           with room, at no cost to this one. ``workload`` (the cluster's, for ``park_early =
           "calibrated"``; read by the caller every few minutes, never here) is handed to each of them.
        2. A rung without a job gets one (submit, or a lost submit looked up by token).
        3. At most ``max_changes`` dispatches resubmit (or move in place).
        4. At most ``max_changes`` parked jobs are cancelled, in ONE call; those the cancel proves gone (and that were
           seen pending this tick) resubmit now, within what is left of the tick's room.
        """
        self._handoffs, self._rejected, self._failures, self._cancels, self._changes = [], [], [], {}, 0
        self._attaches = []
        try:
            return self._tick(dispatches, observations, max_changes, max_parks, workload)
        finally:
            attaches, self._attaches = self._attaches, None
            if attaches:
                self.recorder.write(attaches)

    def _tick(
        self,
        dispatches: Iterable[Dispatch],
        observations: Mapping[str, Observation],
        max_changes: int,
        max_parks: int | None,
        workload: Workload | Mapping[str, Workload] | None = None,
    ) -> TickOutcome:
        live = unended(dispatches)
        now = self.clock.now()
        later: list[tuple[Dispatch, Decision]] = []
        jobless: list[Dispatch] = []
        parks, waiting, max_parks = 0, 0, max_changes if max_parks is None else max_parks
        per_lane = workload if isinstance(workload, Mapping) else None  # several clusters: each one's own
        one = None if isinstance(workload, Mapping) else workload
        with self.recorder.batch():
            for d in live:
                if d.job_id is None:
                    jobless.append(d)
                    continue
                may_leave = parks < max_parks
                seen = one if per_lane is None else per_lane.get(d.rung.lane)
                decision = d.advance(
                    observations.get(d.job_id), now, may_change_rung=False, may_leave_rung=may_leave, workload=seen
                )
                if not decision.effects:
                    if not may_leave and d.waits_for_room:
                        waiting += 1  # its window closed, and this tick has no room left: it parks on a later one
                    continue
                if d.state == State.PARKED and _parked_now(decision):
                    parks += 1
                if self._journal(d, decision) is not None:
                    later.append((d, decision))  # a port call: run after the batch is committed
        for d, decision in later:
            self._guarded(d, decision, journaled=True)
        unsent = [d for d in jobless if not d.history]
        later_ids = {d.id for d in unsent[FIRST_SUBMITS_PER_TICK:]}  # a burst never holds a tick up for long
        self.unsent = len(later_ids)
        for d in jobless:
            if not d.is_final and d.id not in later_ids:
                self._advance(d, None, False)
        movers = [d for d in live if d.waits_for_room and d.state in _CHANGING]
        self._run_all([(d, functools.partial(d.advance, None, may_change_rung=True)) for d in movers[:max_changes]])
        parked = [(d, e) for d, e in self._cancels.values() if d.state == State.PARKED and d.job_id == e.job_id]
        deferred = waiting + max(0, len(movers) - max_changes) + max(0, len(parked) - max_changes)
        to_cancel = parked[:max_changes]
        gone: Mapping[str, Observation] = {}
        try:
            if to_cancel:
                gone = self.clusters.cancel_if_pending([e.job_id for _, e in to_cancel], read_back=False)
        except SchedulerUnreachable as exc:
            log.warning("cancels deferred to the next tick: %s", exc)
        room = max_changes - self._changes
        answered: list[tuple[Dispatch, Callable[[float], Decision]]] = []
        for d, e in to_cancel:
            seen_pending = d.look is not None and d.look.phase is Phase.PENDING
            if room > 0 and e.job_id in gone and seen_pending:
                answered.append((d, functools.partial(d.cancel_answered, gone[e.job_id], may_change_rung=True)))
                room -= 1
        self._run_all(answered)
        return TickOutcome(self._changes, deferred, tuple(self._handoffs), tuple(self._rejected), tuple(self._failures))

    # ----------------------------------------------------------------- running decisions
    def _run_all(self, decide: Sequence[tuple[Dispatch, Callable[[float], Decision]]]) -> None:
        """Run several dispatches' decisions (a tick's rung changes), taken and journaled ``STEPS_PER_COMMIT`` at a
        time: a group's steps in ONE transaction, then each one's port call, in order (every step is committed before
        the call it announces, as in ``_run``: a driver killed between the commit and a call looks the job up by its
        token). A decision with a side effect of its own (a scancel, a paid job's delete) is run alone, after."""
        for start in range(0, len(decide), STEPS_PER_COMMIT):
            calls: list[tuple[Dispatch, Decision]] = []
            alone: list[tuple[Dispatch, Decision]] = []
            with self.recorder.batch():
                for d, take in decide[start : start + STEPS_PER_COMMIT]:
                    decision = take(self.clock.now())
                    if any(isinstance(e, CancelJobs | DeletePaid) for e in decision.effects):
                        alone.append((d, decision))
                    elif self._journal(d, decision) is not None:
                        calls.append((d, decision))
            for d, decision in alone:
                self._guarded(d, decision)
            for d, decision in calls:
                self._guarded(d, decision, journaled=True)

    def _advance(self, d: Dispatch, obs: Observation | None, may_change_rung: bool) -> None:
        self._guarded(d, d.advance(obs, self.clock.now(), may_change_rung=may_change_rung))

    def _guarded(self, d: Dispatch, decision: Decision, *, journaled: bool = False) -> None:
        """Run one dispatch's decision; a port error fails this dispatch's step, never the whole tick."""
        try:
            self._run(d, decision, journaled=journaled)
        except SubmitRejected as exc:
            self._rejected.append((d.id, exc))
        except SchedulerUnreachable as exc:
            log.warning("dispatch %s: %s; will retry next tick", d.id, exc)
        except SchedulerError as exc:
            self._failures.append(f"dispatch {d.id}: {exc}")
            log.warning("dispatch %s: %s", d.id, exc)

    def _run(self, d: Dispatch, decision: Decision, *, journaled: bool = False) -> None:
        """Journal a decision's steps, run its port call, hand the answer back; repeat until nothing is asked."""
        call = self._port_call(decision) if journaled else self._journal(d, decision)
        while call is not None:
            call = self._journal(d, self._call(d, call))

    @staticmethod
    def _port_call(decision: Decision) -> Submit | FindByToken | MoveQos | None:
        for effect in decision.effects:
            if isinstance(effect, Submit | FindByToken | MoveQos):
                return effect
        return None

    def _journal(self, d: Dispatch, decision: Decision) -> Submit | FindByToken | MoveQos | None:
        """Commit a decision's journal effects, note its cancel and handoff; return its port call, if any."""
        call = None
        writes: list[Record | Attach] = []
        scancel: list[str] = []
        deletes: list[str] = []
        for effect in decision.effects:
            if isinstance(effect, Record):
                writes.append(effect)
                if effect.step.trigger in _ENTERED:
                    self._changes += 1
            elif isinstance(effect, Attach):
                if self._attaches is not None:
                    self._attaches.append(effect)
                else:
                    writes.append(effect)
            elif isinstance(effect, CancelIfPending):
                self._cancels[d.id] = (d, effect)
            elif isinstance(effect, HandOff):
                self._handoffs.append(d.id)
            elif isinstance(effect, CancelJobs):
                scancel.extend(effect.job_ids)
            elif isinstance(effect, DeletePaid):
                deletes.append(effect.dispatch_id)
            else:
                call = effect
        if writes:
            self.recorder.write(writes)
        if scancel:
            self.clusters.cancel(scancel)  # after the journal says WITHDRAWN: a restarted driver never resubmits
        for dispatch_id in deletes:
            self._delete_paid(dispatch_id)  # after the journal says so: a restarted driver asks it again
        return call

    def _call(self, d: Dispatch, call: Submit | FindByToken | MoveQos) -> Decision:
        """Run one port call and hand its answer to the dispatch. A call the controller leaves unanswered is an
        outage of its own: the dispatch's clock stops from when it was made (journaled), and its next look resumes it
        (so a stalled sbatch, or a token lookup on a stopped controller, spends no window)."""
        asked_at = self.clock.now()
        try:
            return self._ask(d, call)
        except (SchedulerUnreachable, SlurmCommandMissing) as exc:  # (a command not on PATH: nothing was asked)
            if isinstance(call, Submit) and call.lane != self.clusters.first and not getattr(exc, "delivered", False):
                # A cluster after fellows that cannot be reached at all when its turn comes: nothing was queued
                # there, so its window runs (tried each poll) and it is passed over when the window closes.
                return d.submit_unreached(str(exc), self.clock.now())
            self._pause_from(d, asked_at, f"SLURM did not answer ({exc}); the window waits for that time")
            raise

    def _ask(self, d: Dispatch, call: Submit | FindByToken | MoveQos) -> Decision:
        if isinstance(call, Submit):
            asked_at = self.clock.now()
            try:
                job_id = self.clusters.submit(
                    call.spec, qos=call.qos, token=call.token, deadline=call.deadline, lane=call.lane
                )
            except SubmitRejected as exc:
                try:
                    return d.submit_refused(exc, self.clock.now())
                except SubmitRejected:  # the job itself, on its first rung: journaled REFUSED, then raised
                    self._journal(d, d.refuse(exc, self.clock.now()))
                    raise
            return d.submitted(job_id, self.clock.now(), asked_at=asked_at)
        asked_at = self.clock.now()
        if isinstance(call, FindByToken):
            found = self.clusters.find_by_token(call.token, call.lane)
            self.looked_up.add(d.id)
            if found is not None:
                log.info("dispatch %s: found job %s by token %s", d.id, found.job_id, call.token)
            if self._slow_answer(d, asked_at) and found is None:
                # A stalled controller may still hold the lost sbatch, and queue it after this answer: a late "no
                # such job" proves nothing. The next tick looks again (promptly answered, its "none" is believed).
                return Decision((), None)
            return d.found(found, self.clock.now())
        try:
            moved: bool | QosRejected = self.clusters.change_qos(call.job_id, call.qos)
        except QosRejected as exc:
            moved = exc
        self._slow_answer(d, asked_at)
        return d.move_answered(moved, self.clock.now())

    def _slow_answer(self, d: Dispatch, asked_at: float) -> bool:
        """A lookup or a move the controller answered late (stalled, as a slow sbatch: ``Dispatch.submitted``) is an
        outage of its own: the clock stops from the call (journaled), and the next look resumes it. True if late."""
        now = self.clock.now()
        if now - asked_at <= SLOW_SUBMIT_SECONDS:
            return False
        self._pause_from(d, asked_at, f"SLURM took {now - asked_at:.0f} s to answer; the window waits for that time")
        return True

    def _pause_from(self, d: Dispatch, asked_at: float, why: str) -> None:
        """Journal the dispatch's clock stopped from ``asked_at`` (not before its last step) until its next look."""
        since = max(asked_at, d.history[-1].at) if d.history else asked_at
        self._journal(d, d.pause(self.clock.now(), since=since, why=why))


_CHANGING = frozenset({State.CANCELLED, State.PARKED})
"""The states a rung change leaves from (a dispatch still on its rung waiting to park is not a mover)."""


def _parked_now(decision: Decision) -> bool:
    return any(isinstance(e, Record) and e.step.trigger == "park" for e in decision.effects)


def _with_paid(effect: Effect, paid: PaidMark | None) -> Effect:
    """A paid run's step with the facts the driver knows of it (the row's ``paid`` says the status it leaves)."""
    if paid is not None and isinstance(effect, Record) and effect.paid is not None:
        return attrs.evolve(effect, paid=attrs.evolve(paid, status=effect.paid.status))
    return effect


def _with_command(effect: Effect, command: Command) -> Effect:
    """A lane command's step with what is journaled of the command (the row's ``command`` says its state)."""
    if isinstance(effect, Record) and effect.command is not None:
        return attrs.evolve(effect, command=attrs.evolve(command, status=effect.command.status))
    return effect
