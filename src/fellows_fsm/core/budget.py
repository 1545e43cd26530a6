"""The budget's arithmetic, sans I/O: the calendar windows paid runs count in (``Windows``), what they spent in each
(``spend``), and the check the last free rung asks before a handoff (``BudgetGate``, core/paid.py's ``Gate``).

A paid run counts, all of it, in the day, week and month its ``handed_at`` falls in, in the budget's time zone: the
money is committed when the job is handed off, so a run handed at 23:59 counts today, even the hours it runs
tomorrow, and a day's total never changes after midnight. Weeks start on Monday. Against a budget a live run counts
at its worst case (GPUs times its time limit), an ended one at what it ran (core/paid.py: ``PaidRun``). Nothing here
reads a clock, a file or the journal: ``now`` and the runs are given.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

import attrs

from fellows_fsm.core.paid import worst_gpu_hours

if TYPE_CHECKING:
    from fellows_fsm.core.paid import PaidRun
    from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "BUCKETS",
    "BudgetGate",
    "EndedSum",
    "Limits",
    "Period",
    "Reservation",
    "Spend",
    "Tally",
    "Windows",
    "bucket_of",
    "never_paid",
    "spend",
]

Reservation = tuple[int, float | None, float | None]
"""A dispatch on its way to a paid lane that is not a paid run yet: its GPUs, its time limit in seconds (None: no
limit) and the price per GPU-hour of the lane it goes to (None: no price)."""


class Limits(Protocol):
    """What the gate reads of the ``[budget]`` table (config/budget.py: ``BudgetConfig``; the core imports no
    config)."""

    @property
    def paid_gpu_hours_per_day(self) -> float | None:
        """Paid GPU-hours per calendar day (None: no limit)."""
        ...

    @property
    def paid_cost_per_month(self) -> float | None:
        """Money per calendar month (None: no limit)."""
        ...

    @property
    def max_paid_gpu_hours_per_job(self) -> float | None:
        """GPU-hours one paid run may need at most (None: no limit)."""
        ...

    @property
    def limited(self) -> bool:
        """Is any limit set?"""
        ...

    @property
    def refuse(self) -> bool:
        """``on_budget = "refuse"``."""
        ...

    @property
    def zone(self) -> datetime.tzinfo | None:
        """The zone whose calendar counts (None: local time)."""
        ...


_SLACK = 1e-9
"""Relative slack on a limit: a job that fits exactly is not refused for a float sum's last bit."""


@attrs.frozen
class Windows:
    """The starts of today, this week (Monday) and this month in one time zone, as epoch seconds."""

    day: float
    week: float
    month: float

    @classmethod
    def at(cls, now: float, tz: datetime.tzinfo | None) -> Windows:
        """The windows ``now`` falls in, in ``tz`` (None: this machine's local time)."""
        today = datetime.datetime.fromtimestamp(now, tz).date()

        def midnight(day: datetime.date) -> float:
            # A naive midnight is local time: .timestamp() asks the C library (mktime), DST included.
            return datetime.datetime.combine(day, datetime.time(), tzinfo=tz).timestamp()

        return cls(
            day=midnight(today),
            week=midnight(today - datetime.timedelta(days=today.weekday())),
            month=midnight(today.replace(day=1)),
        )

    @property
    def earliest(self) -> float:
        """The earliest start (a week can begin in the month before): a run handed before it counts in none."""
        return min(self.week, self.month)


@attrs.frozen
class Tally:
    """What the paid runs handed in one window spent: one lane's, or all lanes' (``Period.total``)."""

    runs: int = 0
    live: int = 0
    """How many of them may still spend (handing off, queued, running)."""
    gpu_hours: float = 0.0
    """GPU-hours so far, priced or not."""
    cost: float | None = 0.0
    """The cost so far of the runs that have a price; None when none of them has one (see unpriced_gpu_hours)."""
    unpriced_gpu_hours: float = 0.0
    """GPU-hours so far of runs whose lane has no price: in gpu_hours, in no cost."""
    open_gpu_hours: float = 0.0
    """What the live runs may still add to gpu_hours at worst (their bounds less what they ran; inf: a live run
    has no time limit)."""
    open_cost: float | None = 0.0
    """What the priced live runs may still cost at worst (None when cost is None)."""

    @property
    def worst_gpu_hours(self) -> float:
        """GPU-hours so far plus what the live runs may still add: what a budget counts."""
        return self.gpu_hours + self.open_gpu_hours

    @property
    def worst_cost(self) -> float | None:
        """Cost so far plus what the priced live runs may still cost (None: no run has a price)."""
        return None if self.cost is None or self.open_cost is None else self.cost + self.open_cost


@attrs.frozen
class Period:
    """One window (today, this week, this month): when it began, all lanes' tally, and each lane's."""

    start: float
    total: Tally
    lanes: Mapping[str, Tally]
    """Each lane with a run handed in the window, by name (sorted)."""


@attrs.frozen
class Spend:
    """What the paid runs spent today, this week and this month, as of ``now``."""

    now: float
    day: Period
    week: Period
    month: Period


# One accumulator per window and lane: runs, live, gpu_hours, priced runs, cost, unpriced_gpu_hours,
# open_gpu_hours, open_cost.
_RUNS, _LIVE, _HOURS, _PRICED, _COST, _UNPRICED, _OPEN, _OPEN_COST = range(8)


def _tally(acc: list[float]) -> Tally:
    unpriced = acc[_RUNS] > 0 and acc[_PRICED] == 0
    return Tally(
        runs=int(acc[_RUNS]),
        live=int(acc[_LIVE]),
        gpu_hours=acc[_HOURS],
        cost=None if unpriced else acc[_COST],
        unpriced_gpu_hours=acc[_UNPRICED],
        open_gpu_hours=acc[_OPEN],
        open_cost=None if unpriced else acc[_OPEN_COST],
    )


def _period(start: float, buckets: Iterable[dict[str, list[float]]]) -> Period:
    lanes: dict[str, list[float]] = {}
    for bucket in buckets:
        for name, acc in bucket.items():
            into = lanes.setdefault(name, [0.0] * 8)
            for i, value in enumerate(acc):
                into[i] += value
    total = [sum(acc[i] for acc in lanes.values()) for i in range(8)]
    return Period(start=start, total=_tally(total), lanes={name: _tally(lanes[name]) for name in sorted(lanes)})


@attrs.frozen
class EndedSum:
    """The ended paid runs of one lane handed in one bucket of windows, summed where they are kept (the journal's
    ``paid_sums``: one query, however many), counted as ``PaidRun`` counts one."""

    bucket: str
    """``today``, ``both`` (this week and this month, not today), ``week_only`` or ``month_only``: ``BUCKETS``."""
    lane: str
    runs: int
    gpu_hours: float
    priced: int
    """How many of them have a price."""
    cost: float
    unpriced_gpu_hours: float


BUCKETS = ("today", "both", "week_only", "month_only")
"""The buckets of windows a run falls in, each once: today lies in this week and this month; the rest of the week
and the rest of the month may overlap (``both``) or not (a week that began last month)."""


def bucket_of(handed: float, windows: Windows) -> str | None:
    """The bucket a run handed at ``handed`` counts in (None: before every window)."""
    if handed < windows.earliest:
        return None
    if handed >= windows.day:
        return "today"
    if handed >= windows.week:
        return "both" if handed >= windows.month else "week_only"
    return "month_only"


def spend(runs: Iterable[PaidRun], now: float, tz: datetime.tzinfo | None, *, ended: Iterable[EndedSum] = ()) -> Spend:
    """What ``runs`` (and the already summed ``ended`` runs) spent today, this week and this month (in ``tz``; None:
    local time), each run in the windows its ``handed_at`` falls in, per lane and in all. One pass; no date is built
    per run."""
    windows = Windows.at(now, tz)
    day, week, month = windows.day, windows.week, windows.month
    earliest = windows.earliest
    # Today lies in this week and this month; the rest of the week and the rest of the month may overlap or not
    # (a week that began last month). Each run is added once, to the one bucket of windows it is in; the windows
    # are summed from the buckets at the end.
    today: dict[str, list[float]] = {}
    both: dict[str, list[float]] = {}
    week_only: dict[str, list[float]] = {}
    month_only: dict[str, list[float]] = {}
    named = {"today": today, "both": both, "week_only": week_only, "month_only": month_only}
    for summed in ended:
        into = named[summed.bucket].setdefault(summed.lane, [0.0] * 8)
        into[_RUNS] += summed.runs
        into[_HOURS] += summed.gpu_hours
        into[_PRICED] += summed.priced
        into[_COST] += summed.cost
        into[_UNPRICED] += summed.unpriced_gpu_hours
    for run in runs:
        handed = run.handed_at
        if handed < earliest:
            continue
        if handed >= day:
            bucket = today
        elif handed >= week:
            bucket = both if handed >= month else week_only
        else:
            bucket = month_only
        acc = bucket.get(run.lane)
        if acc is None:
            acc = bucket[run.lane] = [0.0] * 8
        hours = run.gpu_hours(now)
        acc[_RUNS] += 1
        acc[_HOURS] += hours
        price = run.price_per_gpu_hour
        if price is None:
            acc[_UNPRICED] += hours
        else:
            acc[_PRICED] += 1
            acc[_COST] += price * hours
        if run.live:
            still = run.bound_gpu_hours - hours
            if still > 0:
                acc[_OPEN] += still
                if price:
                    acc[_OPEN_COST] += price * still
            acc[_LIVE] += 1
    return Spend(
        now=now,
        day=_period(day, (today,)),
        week=_period(week, (today, both, week_only)),
        month=_period(month, (today, both, month_only)),
    )


def _number(value: float) -> str:
    """At most one decimal, a trailing .0 dropped: 3.5, 4, 16."""
    return f"{value:.1f}".removesuffix(".0")


def _over(total: float, limit: float) -> bool:
    return total > limit + _SLACK * limit


class BudgetGate:
    """The budget as the driver counts it this tick (core/paid.py: ``Gate``): today's committed paid GPU-hours
    and this month's committed cost, from the journal's paid runs and the dispatches already on their way to a paid
    lane, against what the ``[budget]`` allows. ``take`` adds a dispatch's worst case, so a second dispatch in the
    same tick sees the first's."""

    def __init__(
        self,
        config: Limits,
        runs: Iterable[PaidRun],
        now: float,
        reserved: Mapping[str, Reservation],
        price: float | None,
        *,
        ended: Iterable[EndedSum] = (),
    ) -> None:
        """``runs``: the journal's paid runs (at least those handed this month and today), or only the live ones
        with the ended ones already summed in ``ended``; ``reserved``: dispatches on their way to a paid lane but not
        in ``runs`` yet (one that is already a run is counted once, as the run); ``price``: the price per GPU-hour of
        the lane a dispatch this gate passes would go to."""
        self._config = config
        self._price = price
        self._reserved = dict(reserved)
        self._day_gpu_hours = 0.0
        self._month_cost = 0.0
        if not config.limited:
            return  # nothing is ever held back: no need to count
        windows = Windows.at(now, config.zone)
        for summed in ended:
            if summed.bucket == "today":
                self._day_gpu_hours += summed.gpu_hours
            if summed.bucket != "week_only":
                self._month_cost += summed.cost
        pending = dict(self._reserved)
        for run in runs:
            pending.pop(run.dispatch_id, None)
            handed = run.handed_at
            if handed < windows.day and handed < windows.month:
                continue
            committed = run.committed_gpu_hours(now)
            if handed >= windows.day:
                self._day_gpu_hours += committed
            if handed >= windows.month and run.price_per_gpu_hour is not None and committed:
                self._month_cost += run.price_per_gpu_hour * committed
        for gpus, limit_seconds, lane_price in pending.values():
            self._add(worst_gpu_hours(gpus, limit_seconds), lane_price)

    @classmethod
    def counted(cls, config: Limits, day_gpu_hours: float, month_cost: float, price: float | None) -> BudgetGate:
        """A gate over totals counted elsewhere (the shared ledger's, in its server's clock): today's committed paid
        GPU-hours and this month's committed cost, already summed."""
        gate = cls(config, (), 0.0, {}, price)
        gate._day_gpu_hours = day_gpu_hours
        gate._month_cost = month_cost
        return gate

    def _add(self, worst: float, price: float | None) -> None:
        self._day_gpu_hours += worst
        if price is not None and worst:
            self._month_cost += price * worst

    @property
    def refuse(self) -> bool:
        """``on_budget = "refuse"``: a dispatch its budget cannot take ends NO_BUDGET instead of waiting."""
        return self._config.refuse

    @property
    def day_gpu_hours(self) -> float:
        """Today's committed paid GPU-hours: what ended runs ran, live runs' and reservations' worst cases."""
        return self._day_gpu_hours

    @property
    def month_cost(self) -> float:
        """This month's committed cost, counted as ``day_gpu_hours`` is (runs with no price add nothing)."""
        return self._month_cost

    @property
    def reserved(self) -> Mapping[str, Reservation]:
        """The reservations counted: the ones given, and every ``take`` since (a copy)."""
        return dict(self._reserved)

    def refusal(self, dispatch_id: str, spec: JobSpec) -> str | None:
        """Why this dispatch's paid run would pass the budget (one line), or None if it fits, it already holds its
        reservation, or no limit is set."""
        return self.refusal_at(dispatch_id, spec, self._price)

    def refusal_at(self, dispatch_id: str, spec: JobSpec, price: float | None) -> str | None:
        """``refusal`` for a run on a lane of this ``price`` per GPU-hour (a dispatch pinned straight to a paid
        lane: its own lane's price, not the price of the lane after the ladder)."""
        budget = self._config
        if dispatch_id in self._reserved or not budget.limited:
            return None
        need = worst_gpu_hours(spec.gpus, spec.time_limit_seconds)
        if not need:
            return None  # no GPUs: no paid GPU-hours, and no cost at a price per GPU-hour
        if math.isinf(need):
            return (
                "budget: this job has no time limit, so its paid run has no bound under [budget]; "
                "give it --time (e.g. --time 4:00:00)"
            )
        cap = budget.max_paid_gpu_hours_per_job
        if cap is not None and _over(need, cap):
            return (
                f"budget: this job's limit needs {_number(need)} paid GPU-hours, over max_paid_gpu_hours_per_job = "
                f"{_number(cap)}"
            )
        per_day = budget.paid_gpu_hours_per_day
        if per_day is not None:
            used = self._day_gpu_hours
            if math.isinf(used):
                return (
                    "budget: a paid run handed today has no time limit, so today's paid GPU-hours have no bound; "
                    "this job waits until it ends"
                )
            if _over(used + need, per_day):
                return (
                    f"budget: {_number(used)} of {_number(per_day)} paid GPU-hours used today; "
                    f"this job's limit needs {_number(need)}"
                )
        per_month = budget.paid_cost_per_month
        if per_month is not None:
            if price is None:
                return (
                    "budget: the paid lane has no price_per_gpu_hour, so this job's cost cannot be held to "
                    "paid_cost_per_month; give the lane a price_per_gpu_hour"
                )
            spent = self._month_cost
            if math.isinf(spent):
                return (
                    "budget: a paid run handed this month has no time limit, so this month's cost has no bound; "
                    "this job waits until it ends"
                )
            cost = price * need
            if _over(spent + cost, per_month):
                return (
                    f"budget: {_number(spent)} of {_number(per_month)} spent this month; "
                    f"this job's limit may cost {_number(cost)}"
                )
        return None

    def take(self, dispatch_id: str, spec: JobSpec) -> None:
        """Reserve this dispatch's worst case (it leaves its last free rung for the paid lane); a second take of the
        same dispatch reserves nothing more."""
        self.take_at(dispatch_id, spec, self._price)

    def take_at(self, dispatch_id: str, spec: JobSpec, price: float | None) -> None:
        """``take`` for a run on a lane of this ``price`` per GPU-hour."""
        if dispatch_id in self._reserved:
            return
        self._reserved[dispatch_id] = (spec.gpus, spec.time_limit_seconds, price)
        self._add(worst_gpu_hours(spec.gpus, spec.time_limit_seconds), price)


def never_paid(config: Limits, spec: JobSpec, price: float | None) -> str | None:
    """Why a paid run of ``spec`` on a lane of this ``price`` would pass the ``[budget]`` even with nothing else
    spent (the gate's own words, naming the key), or None if it can be paid once the windows have room. Waiting cannot
    help such a job: ``submit`` says so at once, and it walks the free rungs only."""
    gate = BudgetGate(config, (), 0.0, {}, price)
    return gate.refusal_at("", spec, price)
