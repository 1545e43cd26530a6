"""What the free clusters gave, for ``fellows-fsm spend``: the GPU-hours each free job used (sacct's Elapsed times
its GPUs, journaled at its end: journal/ends.py), per cluster, today, this week and this month (by when the job
ended), and what they would have cost at the price of the first paid lane of ``[router] order`` ("saved")."""

from __future__ import annotations

from typing import Any

import attrs
from rich.console import RenderableType
from rich.table import Table

from fellows_fsm.config.file import Config
from fellows_fsm.core.budget import Windows
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui.paid import cost_words, hours_words

__all__ = ["FreeHours", "free_json", "free_table", "read_free", "shared_free"]

_WINDOWS = (("day", "today"), ("week", "this week"), ("month", "this month"))


@attrs.frozen
class FreeHours:
    """The free jobs that ended in each window, per cluster (jobs, GPU-hours), and the price "saved" is read at."""

    windows: dict[str, tuple[tuple[str, int, float], ...]]
    """Per window key (day, week, month): (cluster, jobs, GPU-hours), one per cluster (and user)."""
    price_lane: str | None
    """The first paid lane of ``[router] order`` (None: none has a price)."""
    price_per_gpu_hour: float | None
    users: dict[str, tuple[str, ...]] | None = None
    """The shared ledger's (``spend --scope``): per window, each row's user (None: this journal's, one user)."""

    def gpu_hours(self, window: str) -> float:
        """Every cluster's GPU-hours in ``window``."""
        return sum(hours for _, _, hours in self.windows[window])

    def saved(self, window: str) -> float | None:
        """What ``window``'s free GPU-hours would have cost on the price lane (None: no paid lane has a price)."""
        return None if self.price_per_gpu_hour is None else self.gpu_hours(window) * self.price_per_gpu_hour


def price_of(config: Config) -> tuple[str | None, float | None]:
    """The first lane of ``[router] order`` with a price, and its price per GPU-hour (None, None: none)."""
    for name in config.auto_order[1:]:
        price = config.lane(name).price_per_gpu_hour
        if price is not None:
            return name, price
    return None, None


def read_free(journal: Journal, config: Config, now: float) -> FreeHours:
    """The free GPU-hours of the jobs that ended in each window ``now`` falls in ([budget] timezone): one query
    per window."""
    windows = Windows.at(now, config.budget.zone)
    lane, price = price_of(config)
    sums = {key: tuple(journal.free_sums(getattr(windows, key))) for key, _ in _WINDOWS}
    return FreeHours(sums, lane, price)


def shared_free(rows: list[tuple[str, str, str, int, float]], config: Config) -> FreeHours:
    """The shared ledger's free GPU-hours (``Ledger.free``: window, user, cluster, jobs, GPU-hours) as the local
    ones are shown, "saved" at this config's price lane."""
    lane, price = price_of(config)
    windows = {key: tuple((c, n, h) for w, _, c, n, h in rows if w == key) for key, _ in _WINDOWS}
    users = {key: tuple(u for w, u, *_ in rows if w == key) for key, _ in _WINDOWS}
    return FreeHours(windows, lane, price, users)


def free_json(free: FreeHours) -> dict[str, Any]:
    """``spend --json``'s ``free``: per window (``day``, ``week``, ``month``) ``gpu_hours``, ``saved`` (null: no
    paid lane has a price) and ``clusters`` (each ``jobs`` and ``gpu_hours``; with ``--scope``, ``users`` instead:
    a list of ``user``, ``cluster``, ``jobs``, ``gpu_hours``, ``saved``); ``price_lane`` and
    ``price_per_gpu_hour``, what "saved" is read at."""
    out: dict[str, Any] = {"price_lane": free.price_lane, "price_per_gpu_hour": free.price_per_gpu_hour}
    for key, _ in _WINDOWS:
        out[key] = {"gpu_hours": free.gpu_hours(key), "saved": free.saved(key)}
        if free.users is None:
            out[key]["clusters"] = {name: {"jobs": jobs, "gpu_hours": hours} for name, jobs, hours in free.windows[key]}
        else:
            out[key]["users"] = [
                {"user": user, "cluster": name, "jobs": jobs, "gpu_hours": hours, "saved": _saved(free, hours)}
                for user, (name, jobs, hours) in zip(free.users[key], free.windows[key], strict=True)
            ]
    return out


def _saved(free: FreeHours, hours: float) -> float | None:
    return free.price_per_gpu_hour * hours if free.price_per_gpu_hour is not None else None


def free_table(free: FreeHours, currency: str = "") -> RenderableType:
    """The free GPU-hours per cluster and window, and what they saved at the price lane's price."""
    title = "free clusters, by when their jobs ended"
    if free.price_lane is not None:
        title += f" (saved: at {free.price_lane}'s {cost_words(free.price_per_gpu_hour)} per GPU-hour)"
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1))
    headers = ("window", *(("user",) if free.users is not None else ()), "cluster", "jobs", "GPU-h")
    for header in (*headers, f"saved ({currency})" if currency else "saved"):
        table.add_column(header, no_wrap=True)
    for key, words in _WINDOWS:
        rows = free.windows[key] or (("-", 0, 0.0),)
        users = (free.users[key] or ("-",)) if free.users is not None else None
        for i, (name, jobs, hours) in enumerate(rows):
            who = (users[i],) if users is not None else ()
            cells = (words if i == 0 else "", *who, name, str(jobs), hours_words(hours))
            table.add_row(*cells, cost_words(_saved(free, hours)))
    return table
