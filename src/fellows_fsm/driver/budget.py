"""The budget as one driver counts it, tick by tick (core/paid.py: ``Gate``, asked by the last free rung of a walk
before its paid lane).

The limits are the ``[budget]`` of the config last given to ``submit`` or ``spend`` (journaled: ``remember_budget``),
so a raised budget reaches a driver already running, and two shells see one. What is spent is counted from the
journal's paid runs (core/budget.py: ``BudgetGate``) plus the dispatches already on their way to a paid lane that
are not paid runs yet (their worst case, reserved as they leave their last free rung). Nothing is read unless a
dispatch asks: the journal is read at most once a tick, and only in a tick where a last rung's window closed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.core.budget import BudgetGate, EndedSum, Reservation, Windows
from fellows_fsm.core.paid import LIVE_PAID, PaidRun
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["BUDGET_KEY", "TickGate", "journaled_budget", "remember_budget"]

BUDGET_KEY = "budget"
"""The journal's meta key of the [budget] the driver applies (the latest submit's or spend's)."""


def remember_budget(budget: BudgetConfig, journal: Journal) -> None:
    """Journal the [budget] every driver of this journal applies from its next tick (the latest wins)."""
    journal.put_meta(BUDGET_KEY, budget.table())


def journaled_budget(journal: Journal) -> BudgetConfig | None:
    """The [budget] last journaled, or None if none was."""
    table = journal.get_meta(BUDGET_KEY)
    return BudgetConfig.from_table(table) if isinstance(table, dict) else None


class TickGate:
    """The one Gate every dispatch of a driver shares; ``tick(now)`` starts a new count, built on the first ask."""

    def __init__(
        self,
        journal: Journal,
        default: BudgetConfig,
        reservations: Callable[[], Mapping[str, Reservation]],
        price: float | None,
    ) -> None:
        self.journal = journal
        self.default = default
        """The driver's own config's [budget], when none was journaled."""
        self.reservations = reservations
        """The dispatches of the roster on their way to a paid lane that are not paid runs yet."""
        self.price = price
        """The price per GPU-hour of the paid lane after the ladder."""
        self.now = 0.0
        self._gate: BudgetGate | None = None
        self._limits: BudgetConfig | None = None
        self.builds = 0
        """How many counts were made (at most one a tick): what a test reads."""

    def tick(self, now: float) -> None:
        """A new tick: what is spent is counted again at the first ask."""
        self.now = now
        self._gate = None
        self._limits = None

    @property
    def limits(self) -> BudgetConfig:
        """The [budget] this tick applies."""
        if self._limits is None:
            self._limits = journaled_budget(self.journal) or self.default
        return self._limits

    def _count(self) -> BudgetGate:
        if self._gate is None:
            limits = self.limits
            runs: list[PaidRun] = []
            ended: list[EndedSum] = []
            if limits.limited:
                windows = Windows.at(self.now, limits.zone)
                runs = self.journal.paid_runs(since=windows.earliest, status=sorted(LIVE_PAID))
                ended = self.journal.paid_sums(windows, self.now)  # one query, however many runs ended
            self._gate = BudgetGate(limits, runs, self.now, self.reservations(), self.price, ended=ended)
            self.builds += 1
        return self._gate

    @property
    def refuse(self) -> bool:
        """``on_budget = "refuse"``."""
        return self.limits.refuse

    def refusal(self, dispatch_id: str, spec: JobSpec) -> str | None:
        """Why this dispatch's paid run would pass the budget, or None."""
        if not self.limits.limited:
            return None
        return self._count().refusal(dispatch_id, spec)

    def take(self, dispatch_id: str, spec: JobSpec) -> None:
        """Reserve its worst case for the rest of this tick (the next tick counts it from the roster)."""
        if self.limits.limited:
            self._count().take(dispatch_id, spec)
