"""The budget as one driver counts it, tick by tick (core/paid.py: ``Gate``, asked by the last free rung of a walk
before its paid lane, and by a dispatch pinned straight to a paid lane before its command starts).

The limits are the ``[budget]`` journaled by ``submit`` or ``spend`` (``remember_budget``), so a raised budget reaches
a driver already running, and two shells see one; it changes only from the config it came from (a command with no
config file, or another project's config, never changes it), and each change is journaled and said. What is spent
is counted from the journal's paid runs (core/budget.py: ``BudgetGate``) plus the dispatches already on their way
to a paid lane that are not paid runs yet (their worst case, reserved as they leave their last free rung). Nothing
is read unless a dispatch asks: the journal is read at most once a tick, and only in a tick where one asks.

With a ``[ledger]``, the same gate counts the shared ledger instead of the journal (driver/ledger.py:
``LedgerGate``): the same rows ask it the same question, and a yes is a reservation held there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.core.budget import BudgetGate, EndedSum, Reservation, Windows
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.paid import LIVE_PAID, PaidRun
from fellows_fsm.core.vocab import State
from fellows_fsm.driver.ledger import LedgerGate
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "BUDGET_KEY",
    "LaneGate",
    "TickGate",
    "budget_owner",
    "journaled_budget",
    "on_their_way",
    "remember_budget",
]

log = logging.getLogger(__name__)

BUDGET_KEY = "budget"
"""The journal's meta key of the [budget] the driver applies, with the config it came from (``remember_budget``)."""
NO_FILE = "defaults"
"""The ``source`` of a config read from no file."""


def budget_owner(config: Config) -> str | None:
    """Who may change the journal's [budget]: the config file it comes from (its absolute path), or a config a
    program built with a [budget] (its ``source``); None for a command with no config file, which never changes
    it."""
    if config.source == NO_FILE and config.budget == BudgetConfig():
        return None
    path = Path(config.source)
    return str(path.resolve()) if config.source != NO_FILE and path.is_file() else config.source


def _words(budget: BudgetConfig) -> str:
    """A [budget] in one line: its keys that are set."""
    shown = {k: v for k, v in budget.table().items() if v is not None and not (k == "scope" and v == "user")}
    keys = [f"{k} = {v!r}" for k, v in shown.items() if k != "on_budget" or budget.limited]
    return ", ".join(keys) if budget.limited else "no limit"


def remember_budget(config: Config, journal: Journal, *, at: float, applied: BudgetConfig | None = None) -> str | None:
    """Journal ``config``'s [budget] for every driver of this journal (applied from its next tick), if it may change
    it: a [budget] changes only from the config it came from (another config's, or one of a command with no config
    file, is not applied), unless that config file is gone. ``applied``: what the driver applies while none is
    journaled (its own config's; None: no limit). Returns the line to say on stderr (the change, or why it was not
    applied), or None when nothing changes."""
    owner = budget_owner(config)
    saved = journal.get_meta(BUDGET_KEY)
    kept = journaled_budget(journal)
    kept_owner = saved.get("source") if isinstance(saved, dict) and "table" in saved else None
    new = config.budget
    if kept is not None and kept_owner is not None and owner != kept_owner and Path(kept_owner).is_file():
        if kept == new:
            return None
        if owner is None:
            why = "this command has no config file, so it changes nothing"
        else:
            why = (
                f"this config ({owner}) has another, which is not applied: a [budget] changes only from its own config"
            )
        return (
            f"the driver of {journal.path} keeps the [budget] of {kept_owner} ({_words(kept)}); {why}; to change "
            f"it, edit that file and run `fellows-fsm spend --config {kept_owner}`"
        )
    if owner is None or (kept == new and kept_owner == owner):
        return None
    previous = kept if kept is not None else applied or BudgetConfig()
    record = {"table": new.table(), "source": owner, "at": at, "previous": previous.table()}
    journal.put_meta(BUDGET_KEY, record)
    if new == previous:
        return None  # journaled with its config, and nothing the driver applies changes
    return (
        f"the driver of {journal.path} applies the [budget] of {owner} from its next tick: {_words(new)} "
        f"(was: {_words(previous)})"
    )


def journaled_budget(journal: Journal) -> BudgetConfig | None:
    """The [budget] last journaled, or None if none was."""
    saved = journal.get_meta(BUDGET_KEY)
    if isinstance(saved, dict) and "table" in saved:  # with the config it came from
        saved = saved["table"]
    return BudgetConfig.from_table(saved) if isinstance(saved, dict) else None


_RESERVED_WAIT = frozenset({State.PARKED, State.CANCELLED, State.FAILED_TO_GCP})
_RESERVED_REFUSE = frozenset({State.FAILED_TO_GCP})


def on_their_way(live: Iterable[Dispatch], gate: TickGate) -> dict[str, Reservation]:
    """The dispatches leaving their last free rung for the paid lane, not paid runs yet: their worst case is
    reserved (waiting for the budget, from the park; with on_budget = "refuse", from the give_up)."""
    states = _RESERVED_REFUSE if gate.refuse else _RESERVED_WAIT
    price = gate.price
    return {
        d.id: (d.spec.gpus, d.spec.time_limit_seconds, price)
        for d in live
        if d.state in states and d.paid_gate is not None and d.rung_index == len(d.ladder.rungs) - 1
    }


class TickGate:
    """The one Gate every dispatch of a driver shares; ``tick(now)`` starts a new count, built on the first ask."""

    def __init__(
        self,
        journal: Journal,
        default: BudgetConfig,
        reservations: Callable[[], Mapping[str, Reservation]],
        price: float | None,
        *,
        ledger: LedgerConfig | None = None,
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
        self._applied: BudgetConfig | None = None  # the previous count's, to log a change
        self._unreserved: dict[str, str | None] = {}  # the last reason said per recovered dispatch
        self.builds = 0
        """How many counts were made (at most one a tick): what a test reads."""
        self.ledger = LedgerGate(ledger, journal.path) if ledger is not None else None
        """The shared ledger the budget is counted in instead of the journal (None: the journal alone)."""

    def tick(self, now: float) -> None:
        """A new tick: what is spent is counted again at the first ask; with a ledger, this driver's reservations
        are brought in line with its journal first (``LedgerGate.reconcile``)."""
        self.now = now
        self._gate = None
        self._limits = None
        if self.ledger is not None:
            self.ledger.tick()
            self.ledger.reconcile(self.journal, lambda: self.reservations().keys(), now, asked=self.limits.limited)
            self.ledger.publish_free(self.journal, now)
            self.ledger.publish_live(self.journal)

    def close(self) -> None:
        """Close the connection to the shared ledger, if there is one (the next ask connects again)."""
        if self.ledger is not None:
            self.ledger.publish_free(self.journal, self.now, at_once=True)  # the free ends since the last time
            self.ledger.publish_live(self.journal, now=True)  # what it leaves (nothing live, as a driver exits idle)
            self.ledger.close()

    @property
    def limits(self) -> BudgetConfig:
        """The [budget] this tick applies."""
        if self._limits is None:
            self._limits = journaled_budget(self.journal) or self.default
            if self._applied is not None and self._limits != self._applied:
                log.warning("the [budget] changes: %s (was: %s)", _words(self._limits), _words(self._applied))
            self._applied = self._limits
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
        return self.refusal_at(dispatch_id, spec, self.price)

    def take(self, dispatch_id: str, spec: JobSpec) -> None:
        """Reserve its worst case for the rest of this tick (the next tick counts it from the roster)."""
        self.take_at(dispatch_id, spec, self.price)

    def refusal_at(self, dispatch_id: str, spec: JobSpec, price: float | None) -> str | None:
        """``refusal`` for a run on a lane of this price per GPU-hour."""
        if not self.limits.limited:
            return None
        if self.ledger is not None:
            return self.ledger.refusal(dispatch_id, spec, price, self.limits)
        return self._count().refusal_at(dispatch_id, spec, price)

    def take_at(self, dispatch_id: str, spec: JobSpec, price: float | None) -> None:
        """``take`` for a run on a lane of this price per GPU-hour (the next tick counts it from its paid run)."""
        if self.limits.limited and self.ledger is not None:
            self.ledger.take(dispatch_id, spec, price, self.limits)
        elif self.limits.limited:
            self._count().take_at(dispatch_id, spec, price)

    def unreserved(self, d: Dispatch) -> str | None:
        """Why a dispatch recovered after its give_up (FAILED_TO_GCP: its handoff not started) may not be handed to
        the paid lane yet, or None. With a ledger, its reservation is asked of it again (it may have lapsed while no
        driver ran, or the ledger may not answer): refused, it waits for a poll that has one (said once per reason).
        Without one, its state is its reservation (``on_their_way``)."""
        if d.state is not State.FAILED_TO_GCP or d.paid_gate is None or self.ledger is None or not self.limits.limited:
            return None
        why = self.ledger.refusal(d.id, d.spec, self.price, self.limits)
        if why is not None and self._unreserved.get(d.id) != why:
            log.warning("dispatch %s waits for its paid handoff: %s", d.id, why)
        self._unreserved[d.id] = why
        return why

    def priced(self, price: float | None) -> LaneGate:
        """This gate as a dispatch pinned straight to a lane of this price per GPU-hour asks it."""
        return LaneGate(self, price)


class LaneGate:
    """The tick's one gate (``TickGate``) as a dispatch pinned straight to a paid lane asks it (core/paid.py:
    ``Gate``): the same count, at its own lane's price."""

    def __init__(self, tick: TickGate, price: float | None) -> None:
        self.tick = tick
        self.price = price

    @property
    def refuse(self) -> bool:
        """``on_budget = "refuse"``."""
        return self.tick.refuse

    def refusal(self, dispatch_id: str, spec: JobSpec) -> str | None:
        """Why this dispatch's paid run would pass the budget, or None."""
        return self.tick.refusal_at(dispatch_id, spec, self.price)

    def take(self, dispatch_id: str, spec: JobSpec) -> None:
        """Reserve its worst case for the rest of this tick (its hand_off step journals its paid run)."""
        self.tick.take_at(dispatch_id, spec, self.price)
