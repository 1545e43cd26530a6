"""A dispatch pinned straight to a command lane (``submit --pin gcp``), sans I/O: no ladder, so no rung, job or look;
its steps are rows of the same table (lifecycle.py: ``pin``, then the lane command's rows), fired by the same engine
(machine.py) as a ladder Dispatch, and returned as a Decision the driver journals. It never runs the command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

from fellows_fsm.core import machine
from fellows_fsm.core.effects import CommandEnd, Decision, Effect, Step
from fellows_fsm.core.paid import Gate
from fellows_fsm.core.paid_tail import LaneSaid
from fellows_fsm.core.row import INITIAL
from fellows_fsm.core.vocab import FINAL_STATES, Trigger
from fellows_fsm.errors import TransitionNotAllowed
from fellows_fsm.scheduler.port import JobSpec, Observation

__all__ = ["LaneDispatch"]


# Not frozen: transitions sets ``state`` on the model (as on a Dispatch).
@attrs.define(eq=False)
class LaneDispatch:
    """One dispatch pinned to the command lane ``lane``: the model the lane's machine drives."""

    id: str
    lane: str
    state: str = INITIAL
    history: list[Step] = attrs.field(factory=list)
    """The steps taken (what the journal holds); a restored one replays them."""
    now: float = attrs.field(init=False, default=0.0)
    note: str = attrs.field(init=False, default="")
    recalled: tuple[str, ...] = attrs.field(init=False, default=())
    effects: list[Effect] = attrs.field(init=False, factory=list)
    spec: JobSpec | None = attrs.field(init=False, default=None)
    """Its job, as the budget reads it (set by the driver before its command starts)."""
    paid_gate: Gate | None = attrs.field(init=False, default=None)
    """The [budget] its paid lane's run asks before its command starts (None: no budget, or asked already)."""
    news: CommandEnd | LaneSaid | None = attrs.field(init=False, default=None)
    """What the driver heard of its lane command's end or its paid job, while the row it asks is found and fired."""
    budget_note: str = attrs.field(init=False, default="")
    """The reason of its last ``budget_wait`` step (the step is journaled once per reason)."""

    # What a step reads of a ladder dispatch, and a lane-pinned one has not: no ladder, rung, job or look.
    ladder: ClassVar[None] = None
    rung_index: ClassVar[int] = 0
    job_id: ClassVar[str | None] = None
    look: ClassVar[Observation | None] = None
    on_rung: ClassVar[bool] = False
    pinned: ClassVar[bool] = True

    @classmethod
    def restore(cls, dispatch_id: str, lane: str, *, state: str, history: Sequence[Step]) -> LaneDispatch:
        """Rebuild it from its journaled steps; a journal written before its rows (no steps) gives its state."""
        d = cls(dispatch_id, lane)
        machine.replay(d, list(history))
        if not history:
            d.state = state
        return d

    @property
    def label(self) -> str:
        """Its state as shown (a lane state has no rung label)."""
        return self.state

    @property
    def is_final(self) -> bool:
        """Is it past its command (handed off, failed, unknown) or withdrawn?"""
        return self.state in FINAL_STATES

    def pin(self, now: float) -> Decision:
        """Its first step (``pin``): HANDING_OFF, journaled before its lane's command is started."""
        return self.fire(Trigger.PIN, now)

    def look_again(self, now: float) -> Decision:
        """Ask the rows of its state that no event fires (the budget's, before its command starts), in table order,
        and fire the first whose guards all hold (no step if none does)."""
        self.now = now
        for trigger, first, rest, _ in machine.rows_by_state(None).get(self.state, ()):
            if first(self) and all(guard(self) for guard in rest):  # type: ignore[arg-type]  # (no rung read)
                return self.fire(trigger, now)
        return Decision((), None)

    def hear(self, news: CommandEnd | LaneSaid, now: float) -> str | None:
        """The row what the driver heard asks (how its lane command ended, what its paid lane said), kept for
        ``fire``; None: nothing new."""
        return machine.heard(self, news, now)

    def fire(self, trigger: str, now: float, *, note: str = "") -> Decision:
        """Fire one told row (its command started, run again, ended); TransitionNotAllowed names what refused it."""
        self.now, self.note, self.effects = now, note, []
        try:
            machine.fire(self, trigger)
        except TransitionNotAllowed:
            self.effects = []
            raise
        decision = Decision(tuple(self.effects), None)
        self.effects = []
        return decision

    def recall(self, job_ids: Sequence[str], now: float, *, trigger: str = Trigger.RECALL) -> Decision:
        """A user's cancel before its command ran: journal WITHDRAWN (it has no job: nothing to scancel)."""
        self.recalled = tuple(job_ids)
        return self.fire(trigger, now, note="")
