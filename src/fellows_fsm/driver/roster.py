"""The roster: every dispatch one driver drives, by where it stands (on the ladder, handing off, waiting for its
lane's command, its command running), with what each was created with and how far the journal was read.

It holds and answers; it decides nothing and does no I/O. The router, recovery and withdrawal share it, and each
changes it only through its methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.driver.handoffs import Handoffs
from fellows_fsm.lanes.base import HandoffLane
from fellows_fsm.lanes.handoff import Handoff

if TYPE_CHECKING:
    from fellows_fsm.core.paid import Gate
    from fellows_fsm.driver.paid import PaidFollower
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["Kept", "Roster"]

K = TypeVar("K")
V = TypeVar("V")


class Kept(dict[K, V]):
    """One object per distinct value, for the thousands of dispatches that share a few (``kept.setdefault(value,
    value)`` returns the one kept): at most ``limit`` distinct values, then it starts over, so a long-lived driver's
    many distinct values are not kept for ever (a value not kept is only not shared)."""

    def __init__(self, limit: int = 1024) -> None:
        super().__init__()
        self.limit = limit

    def setdefault(self, key: K, default: V) -> V:
        if key not in self and len(self) >= self.limit:
            self.clear()
        return super().setdefault(key, default)


class Roster:
    """The dispatches of one driver: ladder ones by id, and the lane commands (the handoffs' own views)."""

    def __init__(self, handoffs: Handoffs, paid: PaidFollower | None = None, gate: Gate | None = None) -> None:
        self.handoffs = handoffs
        self.paid = paid
        """The paid jobs followed (after a handoff to a followed lane) and the deletes not yet taken."""
        self.gate = gate
        """The budget every dispatch with a lane after its ladder asks before it leaves its last free rung."""
        self.live: dict[str, Dispatch] = {}
        """Dispatches on the ladder (or waiting for their handoff), by id."""
        self.handing: dict[str, Dispatch] = {}
        """Ladder dispatches whose fallback lane's command runs (HANDING_OFF), by id."""
        self.settings: dict[str, dict[str, Any]] = {}
        """What each driven dispatch was created with (fallback lane, router options, config file)."""
        self.parked_out: list[str] = []
        """Recovered dispatches that had parked out of the ladder: handed off by the next poll (exactly once)."""
        self.adopted_upto = 0
        """The journal's last dispatch row the driver has looked at (later rows are adopted on the next tick)."""
        self.ladders: dict[Ladder, Ladder] = {}
        """One object per distinct ladder of the dispatches driven (thousands of dispatches share a few)."""
        self.specs: Kept[JobSpec, JobSpec] = Kept()
        """One object per distinct job of the dispatches driven (restored from their rows: a JobSpec each)."""
        self._settings_kept: Kept[str, dict[str, Any]] = Kept()
        """One dict per distinct settings (by their JSON): each row's decoded settings held 1.6 KB a dispatch."""

    # ----------------------------------------------------------------- views
    @property
    def pending(self) -> dict[str, tuple[str, JobSpec]]:
        """Dispatches pinned to a command lane whose command has not started yet (lane name, job), by id."""
        return self.handoffs.pending

    @property
    def running(self) -> dict[str, tuple[str, Handoff]]:
        """Lane commands under way (lane name, handle), by dispatch id."""
        return self.handoffs.running

    @property
    def busy(self) -> bool:
        """True while any dispatch is on the ladder, waiting for its handoff, handing off, or paid and followed."""
        paid = self.paid is not None and self.paid.busy
        return bool(self.live or self.handing or self.pending or self.running) or paid

    @property
    def driven(self) -> list[str]:
        """The ids of every dispatch driven, each once."""
        paid = self.paid.following if self.paid is not None else {}
        return list(dict.fromkeys([*self.live, *self.handing, *self.pending, *self.running, *paid]))

    def __contains__(self, dispatch_id: object) -> bool:
        if self.paid is not None and dispatch_id in self.paid:
            return True
        return any(dispatch_id in ids for ids in (self.live, self.handing, self.pending, self.running))

    # ----------------------------------------------------------------- changes
    def take(self, d: Dispatch, settings: dict[str, Any], *, parked_out: bool = False, handing: bool = False) -> None:
        """Drive a ladder dispatch; one that ``parked_out`` of its ladder is handed off by the next poll (already
        ``handing``: its command is followed, never started twice)."""
        (self.handing if handing else self.live)[d.id] = d
        if self.gate is not None and settings.get("fallback") is not None:
            d.paid_gate = self.gate
        self.settings[d.id] = self._settings_kept.setdefault(json.dumps(settings, sort_keys=True), settings)
        if parked_out:
            self.parked_out.append(d.id)

    def wait_for_command(self, dispatch_id: str, lane: str, spec: JobSpec, created_with: HandoffLane | None) -> None:
        """Drive a dispatch pinned to command lane ``lane``: its command starts at the next look (with the lane it
        was ``created_with`` when that differs from the driver's own)."""
        if created_with is not None:
            self.handoffs.pinned_lanes[dispatch_id] = created_with
        self.handoffs.pending[dispatch_id] = (lane, spec)

    def take_parked_out(self, unreserved: Callable[[Dispatch], str | None] = lambda _: None) -> list[Dispatch]:
        """The recovered dispatches that parked out and are still driven, once (the next poll hands them off); one
        whose paid run ``unreserved`` says has no reservation (driver/budget.py: ``TickGate.unreserved``) is kept
        for the next poll instead: never handed to a paid lane without one."""
        ids, self.parked_out = self.parked_out, []
        ready = []
        for d in (d for i in ids if (d := self.live.get(i) or self.handing.get(i)) is not None):
            if unreserved(d) is None:
                ready.append(d)
            else:
                self.parked_out.append(d.id)
        return ready

    def handing_off(self, d: Dispatch) -> None:
        """``d`` left the ladder for its fallback lane's command."""
        self.live.pop(d.id, None)
        self.handing[d.id] = d

    def handed(self, dispatch_id: str) -> Dispatch | None:
        """A fallback lane's command ended: the ladder dispatch that was handing off (None: a lane-pinned one)."""
        return self.handing.pop(dispatch_id, None)

    def ended_before_command(self, dispatch_id: str) -> None:
        """A dispatch pinned to a lane ended before its command started (NO_BUDGET): no longer driven."""
        self.pending.pop(dispatch_id, None)
        self.handoffs.pinned_lanes.pop(dispatch_id, None)

    def ended(self, dispatch_id: str) -> None:
        """A ladder dispatch is final (or refused, or left the ladder with no lane): no longer driven."""
        self.live.pop(dispatch_id, None)

    def withdrawn(self, dispatch_id: str) -> Dispatch | None:
        """A user's cancel takes a dispatch away, wherever it waits; return it if it was on the ladder."""
        self.pending.pop(dispatch_id, None)
        if dispatch_id in self.parked_out:
            self.parked_out.remove(dispatch_id)
        return self.live.pop(dispatch_id, None)

    def read_upto(self, rowid: int) -> None:
        """The journal's dispatch rows up to ``rowid`` have been looked at."""
        self.adopted_upto = rowid
