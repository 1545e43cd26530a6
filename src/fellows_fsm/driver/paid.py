"""The paid jobs one driver follows: after a handoff to a followed lane (PAID_QUEUED), each lane is asked ONCE per
poll interval where all of its paid jobs stand (``PaidLane.look``: one list call); each answer is told to its
dispatch (``LaneSaid``), whose table picks the row (core/paid_tail.py), fired through the executor and journaled
with what the journal keeps of the run (its times, its run length). A job queued past its lane's
``queue_timeout_seconds`` is deleted (the ``paid_stuck`` row, its guard ``queued_too_long``, journaled first).
Every delete (a user's cancel, a stuck queue) is asked once, after its step is journaled, and asked again each poll
until the lane takes it (its run stays counted at its worst case till then); a driver restarted in between asks it
again (the run's status is ``cancelling`` in the journal). A job its lane cannot be looked at for (the list call
fails, or says nothing of it) is deleted by name once the longest it may have run passes its time limit (the
``paid_overrun`` row, its guard ``past_time_limit``): a delete needs no look.

It decides nothing the table does not say (it writes each step's words), and prints nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping

from fellows_fsm.clock import Clock
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.paid import PaidLook, PaidMark
from fellows_fsm.core.paid_tail import LaneSaid, lost_since, overrun
from fellows_fsm.core.vocab import PAID_LIVE_STATES, PaidStatus, State, Trigger
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import PaidLane
from fellows_fsm.lanes.command.lane import HANDOFFS
from fellows_fsm.lanes.handoff import HandoffFiles

__all__ = ["PaidFollower"]

log = logging.getLogger(__name__)

Model = Dispatch | LaneDispatch


class PaidFollower:
    """Every paid job of one driver that is followed (live) or being deleted, by dispatch id."""

    def __init__(
        self, journal: Journal, clock: Clock, *, interval: float, step: Callable[[Model, str, str, PaidMark], None]
    ) -> None:
        self.journal = journal
        self.clock = clock
        self.interval = interval
        """At most one look per lane per this many seconds of wall time (the poll interval)."""
        self.following: dict[str, tuple[str, PaidLane, Model]] = {}
        """Live paid dispatches (PAID_QUEUED, PAID_RUNNING): their lane's name, the lane, the dispatch."""
        self.deleting: dict[str, tuple[str, PaidLane]] = {}
        """Paid jobs whose delete the lane has not taken yet (asked again each poll)."""
        self.refusals: dict[str, str] = {}
        """The lane's last words on each delete it has not taken yet, by dispatch id (journaled as the run's note)."""
        self.step = step
        """Fires a paid row on a dispatch and journals it (the executor's ``paid_step``)."""
        self.looks = 0
        """Look calls made (one per lane per poll interval at most): what the benchmark and tests count."""
        self.failures: list[str] = []
        self._looked: dict[str, float] = {}
        self._last_look: dict[str, float] = {}
        self._bounds: dict[str, tuple[float, float]] = {}
        """Runs deleted at their time limit: (the limit, when a poll first saw them running)."""
        self._seen: dict[str, float] = {}
        """When a look last said where each followed job stands (a queued one may have started just after)."""

    @property
    def busy(self) -> bool:
        """True while a paid job is followed or its delete is still to be taken."""
        return bool(self.following or self.deleting)

    def __contains__(self, dispatch_id: object) -> bool:
        return dispatch_id in self.following or dispatch_id in self.deleting

    def follow(self, d: Model, lane_name: str, lane: PaidLane) -> None:
        """Follow ``d``'s paid job from now on (the lane has it: PAID_QUEUED or PAID_RUNNING)."""
        self.following[d.id] = (lane_name, lane, d)
        # Where it stood is known from now (a recovered one's last look was another driver's, at a time unknown):
        # a job queued longer than its limit is never deleted just because the first look after a restart failed.
        self._seen.setdefault(d.id, self.clock.now())

    def model(self, dispatch_id: str) -> Model | None:
        """The followed dispatch (to fire a user's cancel on), or None."""
        entry = self.following.get(dispatch_id)
        return entry[2] if entry is not None else None

    def delete_later(self, dispatch_id: str, lane_name: str, lane: PaidLane) -> None:
        """A recovered run whose delete was journaled but maybe never taken: ask it again at the next poll."""
        self.deleting[dispatch_id] = (lane_name, lane)

    # ----------------------------------------------------------------- a poll
    def poll(self) -> None:
        """Ask each lane once (if its interval has passed) where its paid jobs stand; fire what each answer asks;
        ask every delete not yet taken again."""
        now = self.clock.now()
        for dispatch_id in list(self.deleting):
            self._delete(dispatch_id)
        by_lane: dict[str, list[str]] = {}
        for dispatch_id, (lane_name, _, _) in self.following.items():
            by_lane.setdefault(lane_name, []).append(dispatch_id)
        for lane_name, ids in by_lane.items():
            if now - self._looked.get(lane_name, -math.inf) < self.interval * 0.9:
                continue  # (a poll a little early: the cadence's own jitter, not a second look)
            self._looked[lane_name] = now
            lane = self.following[ids[0]][1]
            try:
                self.looks += 1
                looks: Mapping[str, PaidLook] = lane.look(ids)
            except FellowsError as exc:
                self._fail(f"lane {lane_name}: could not tell where its paid jobs stand ({exc}); asked again next poll")
                for dispatch_id in ids:  # unseen: one whose bound may have passed is deleted by name all the same
                    self._answer(dispatch_id, None, now, since=now, blind=True)
                continue
            previous = self._last_look.get(lane_name, now)
            self._last_look[lane_name] = now
            for dispatch_id in ids:
                self._answer(dispatch_id, looks.get(dispatch_id), now, since=previous)

    def _answer(
        self, dispatch_id: str, look: PaidLook | None, now: float, *, since: float, blind: bool = False
    ) -> None:
        """Fire the row a look asks (the table's: core/paid_tail.py); ``blind``: the lane could not be looked at (only
        a passed bound is acted on)."""
        lane_name, lane, d = self.following[dispatch_id]
        if look is not None and look.status != PaidStatus.UNKNOWN:
            self._seen[dispatch_id] = now
        limit = d.spec.time_limit_seconds if isinstance(d, Dispatch) else self._limit(d.id)
        said = LaneSaid(
            look, blind, lane.queue_timeout_seconds, lane.stops_at_limit, self.interval, limit, self._seen.get(d.id)
        )
        trigger = d.hear(said, now)
        if trigger is None:
            return
        run_seconds = look.run_seconds if look is not None else None
        note = look.note if look is not None else ""
        ended = trigger in (Trigger.PAID_END, Trigger.PAID_FAIL, Trigger.PAID_GONE)  # (its length is journaled)
        lost = lost_since(d)
        if ended and run_seconds is None and lost is not None:
            run_seconds = now - lost  # its lost command may have made it at once: counted from the command's start
        elif ended and d.state == State.PAID_QUEUED and run_seconds is None and trigger != Trigger.PAID_GONE:
            run_seconds = now - since  # it ran between two looks: counted from the look that saw it queued
        if trigger == Trigger.PAID_STUCK:
            queued_at = d.history[-1].at if d.history else now
            note = (
                f"queued on {lane_name} for {now - queued_at:.0f} s, past its queue_timeout_seconds = "
                f"{lane.queue_timeout_seconds:g}: deleted; no second paid job is made (submit it again to try once "
                "more)"
            )
        elif trigger == Trigger.PAID_OVERRUN:
            note = self._overrun_note(d, lane_name, lane)
        elif trigger == Trigger.HANDOFF_UNKNOWN:
            note = (
                f"{lane_name}'s status finds no job of it: how its lost command ended stays unknown (counted at its "
                "worst case); never run again"
            )
        elif trigger == Trigger.PAID_GONE:
            word = look.status if look is not None else PaidStatus.GONE
            how = "deleted" if word == PaidStatus.GONE else str(word)
            said_note = f": {note}" if note else ""
            note = f"its paid job on {lane_name} was {how} outside fellows-fsm{said_note}; never made again"
        elif not note:
            note = f"{lane_name} says {look.status if look is not None else 'nothing'}"
        self.step(d, trigger, note, PaidMark("", run_seconds=run_seconds, note=note))
        if d.state not in PAID_LIVE_STATES:
            self.following.pop(dispatch_id, None)
            self._seen.pop(dispatch_id, None)
            if dispatch_id not in self.deleting:
                self._forget(dispatch_id)

    def _overrun_note(self, d: Model, lane_name: str, lane: PaidLane) -> str:
        """Why a paid job about to run past its time limit is deleted (the ``paid_overrun`` row, its guard
        ``past_time_limit``), and the limit it is counted at if the delete lands just past it."""
        facts = overrun(d)
        assert facts is not None, "past_time_limit held: the run has a limit and a start"
        limit, started, ran, unseen = facts
        self._bounds[d.id] = (limit, started)
        if lane.stops_at_limit:
            why = f"past its time limit of {limit:g} s"
        else:
            why = f"within a poll ({self.interval:g} s) of its time limit of {limit:g} s, which the lane does not stop"
        bound = "so it never costs more than the bound it was handed off with"
        if not unseen:
            return f"ran {ran:.0f} s on {lane_name}, {why}: deleted, {bound}"
        seen = "first seen running" if d.state == State.PAID_RUNNING else "last seen queued"
        seen = "its lost command started" if lost_since(d) is not None else seen
        return (
            f"{lane_name} could not be looked at: {seen} {ran:.0f} s ago, so it may have run {why}: deleted by name "
            f"(a delete needs no look), {bound}"
        )

    def _limit(self, dispatch_id: str) -> float | None:
        run = self.journal.paid_run(dispatch_id)
        return run.limit_seconds if run is not None else None

    # ----------------------------------------------------------------- deletes
    def delete(self, dispatch_id: str) -> None:
        """Delete a dispatch's paid job now (its step is journaled: a user's cancel, a stuck queue); one the lane
        does not take is asked again each poll."""
        entry = self.following.pop(dispatch_id, None)
        if entry is not None:
            self.deleting[dispatch_id] = (entry[0], entry[1])
        elif dispatch_id not in self.deleting:
            log.warning("dispatch %s: a paid delete for a job this driver does not follow", dispatch_id)
            return
        self._delete(dispatch_id)

    def _delete(self, dispatch_id: str) -> None:
        lane_name, lane = self.deleting[dispatch_id]
        try:
            lane.delete(dispatch_id)
        except FellowsError as exc:
            self._fail(
                f"dispatch {dispatch_id}: {lane_name} did not take the delete of its paid job ({exc}); asked again "
                "next poll"
            )
            if self.refusals.get(dispatch_id) != str(exc):  # journaled once per new answer, not per poll
                self.refusals[dispatch_id] = str(exc)
                mark = PaidMark(PaidStatus.CANCELLING, note=str(exc))  # what `cancel` and `status` then say
                self.journal.set_paid(dispatch_id, self.clock.now(), mark)
            return
        del self.deleting[dispatch_id]
        self.refusals.pop(dispatch_id, None)
        now = self.clock.now()
        self.journal.set_paid(
            dispatch_id,
            now,
            PaidMark(PaidStatus.CANCELLED, run_seconds=self._bounded(dispatch_id, now), note="deleted"),
        )
        self._forget(dispatch_id)

    def _bounded(self, dispatch_id: str, now: float) -> float | None:
        """A run deleted at its limit whose delete landed just past it (the poll's and the delete's own time, at
        most a poll interval): counted at its limit, never past the bound; None: counted as it ran."""
        limit, started = self._bounds.pop(dispatch_id, (None, now))
        if limit is None or not limit < now - started <= limit + self.interval:
            return None
        return limit

    def _forget(self, dispatch_id: str) -> None:
        """Its paid job ended (or its delete was taken): the job's values its lane's templates were filled with
        are needed no more (a lost command's output stays: its note points at it)."""
        with contextlib.suppress(OSError):  # (best effort: a file left is only a file)
            HandoffFiles(self.journal.path.parent / HANDOFFS, dispatch_id).job.unlink(missing_ok=True)

    def _fail(self, line: str) -> None:
        log.warning("%s", line)
        self.failures.append(line)
