"""The steps: what a dispatch keeps of its own around each transition it fires (deadlines, notes, the hold and
pause clocks). Which step comes next is the table's business (machine.py); these only keep the books.
"""

from __future__ import annotations

import time

from fellows_fsm.core.effects import Attach, Effect, HandOff
from fellows_fsm.core.guards import Guards
from fellows_fsm.core.ladder import window_deadline
from fellows_fsm.core.machine import Step
from fellows_fsm.scheduler import Observation

__all__ = ["EARLY_PARK", "Steps"]

EARLY_PARK = "park_early="
"""How the note of a park step decided by the ``park_early`` policy begins (the journal's mark of an early park)."""


class Steps(Guards):
    """One method per trigger (``_<trigger>``), each firing it through the machine and keeping the books."""

    id: str
    history: list[Step]
    note: str
    entered_at: float
    paused_since: float | None
    unknown_since: float | None
    left_early: bool
    _out: list[Effect]

    def _fire(self, trigger: str) -> None:
        raise NotImplementedError

    def _see(self, job_id: str | None, observation: Observation | None) -> None:
        raise NotImplementedError

    def _pause(self, since: float | None = None, why: str = "") -> None:
        """Stop the ladder's clock from ``since`` (default now). The step is journaled AT ``since``, so a replay
        of the journal moves the window by exactly what the live dispatch moved it by."""
        self.paused_since = min(self.now, since) if since is not None else self.now
        clock = time.strftime("%H:%M:%S", time.localtime(self.paused_since))
        self.note = why or f"SLURM has not answered since {clock}"
        now, self.now = self.now, self.paused_since
        try:
            self._fire("pause")
        finally:
            self.now = now
        self.paused = True

    def _resume(self) -> None:
        """The controller answers again: the clock runs on, every window later by the outage's length."""
        self._fire("resume")
        self.paused = False
        self._restart_clock(self.paused_since, "pause")
        self.paused_since = None

    def _start(self) -> None:
        obs = self.look
        if obs is not None and obs.qos and obs.qos != self.rung.qos and self.on_rung:
            self.note = f"runs on {obs.qos}, not {self.rung.qos}: someone else moved job {self.job_id} (SLURM says so)"
        self._fire("start")

    def _defer(self) -> None:
        """Someone else moved the job: their decision, like a hold. It stays where they put it, never walked."""
        changes = "; ".join(self.moved_by_others())
        self.note = (
            f"job {self.job_id} was moved by someone else ({changes}); their decision: it is no longer walked, "
            "and runs (or ends) where they put it"
        )
        self._fire("defer")
        self.deferred = True

    def _withdraw(self) -> None:
        obs = self.look
        state = obs.state if obs is not None else "gone"
        if self.held and (obs is None or not obs.ended_by_others):
            self.note = f"job {self.job_id} ended ({state}) while held; a hold is someone's decision: not resubmitted"
        elif self.deferred and (obs is None or not obs.ended_by_others):
            self.note = (
                f"job {self.job_id} ended ({state}) after someone else moved it; their decision: not resubmitted"
            )
        else:
            self.note = f"job {self.job_id} was cancelled outside fellows-fsm ({state}); not resubmitted"
        self._fire("withdraw")

    def _drop(self) -> None:
        self._fire("drop")

    def _hold(self) -> None:
        self._fire("hold")
        self.held = True

    def _release(self) -> None:
        """The hold was lifted: the window resumes where the hold stopped it (time held is not counted)."""
        self._fire("release")
        self.held = False
        self._restart_clock(None, "hold")

    def _restart_clock(self, stopped_at: float | None, stopped_by: str) -> None:
        """Move the deadline later by how long the clock stood: from ``stopped_at`` (else the latest
        ``stopped_by`` step) to the step just journaled."""
        if stopped_at is None:
            stopped_at = next((st.at for st in reversed(self.history) if st.trigger == stopped_by), self.history[-1].at)
        self.deadline += self.history[-1].at - stopped_at

    def _park(self) -> None:
        if not self.rung_expired() and not self.rung_cannot_start() and not self.held:
            early = self.early_park_reason()
            if early is not None:
                self.note = f"{EARLY_PARK}{self.park_early}: {early}"
        self._fire("park")
        self.left_early = self.history[-1].note.startswith(EARLY_PARK)

    def _cancel(self) -> None:
        self._fire("cancel")

    def _move(self) -> None:
        self._enter_next_rung("move")
        self.moved = False
        self._see(self.job_id, None)  # the last look was at the previous rung: the next poll looks at this one
        assert self.job_id is not None
        self._out.append(Attach(self.id, self.rung_index, self.job_id, self.now))

    def _resubmit(self) -> None:
        self._enter_next_rung("resubmit")
        self._see(None, None)
        if self.rung_expired():
            # The walk ran late (an outage, or caps shorter than the poll): this rung's window closed before it
            # opened. Queue nothing; the next step parks it, so GCP is never later than promised.
            self.note = "window closed before it opened; rung passed over without a job"

    def _enter_next_rung(self, trigger: str) -> None:
        """Fire ``trigger`` onto the next rung and open its window (chained to the previous one)."""
        previous_deadline = self.deadline
        self._fire(trigger)
        self.rung_index += 1
        self.entered_at = self.now
        self.deadline = window_deadline(previous_deadline, self.now, self.rung, carried=self.left_early)
        self.left_early = False
        self.refused = False
        self.unknown_since = None

    def _give_up(self) -> None:
        self._fire("give_up")
        self._out.append(HandOff(self.id))
