"""``fellows-fsm spend``: what the paid runs spent today, this week and this month (GPU-hours, cost; per lane), what
the live ones may still add at worst, and the ``[budget]`` limits if set.

The arithmetic is core/budget.py's (``spend``); the runs are read in one query (journal/queries.py:
``read_spend``). Here are only the table and the JSON object.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.clock import iso_utc
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.core.budget import Period, Spend, Tally
from fellows_fsm.driver.budget import journaled_budget, remember_budget
from fellows_fsm.driver.inbox import driver_budget
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal.queries import read_spend
from fellows_fsm.ui.app import config_of, config_option, echo_json, main, make_console, open_journal
from fellows_fsm.ui.free import free_json, free_table, read_free
from fellows_fsm.ui.ledger import read_shared_spend, shared_spend_json, shared_spend_table
from fellows_fsm.ui.paid import cost_words, hours_words

__all__ = ["spend", "spend_json", "spend_table"]

_WINDOWS = (("day", "today"), ("week", "this week"), ("month", "this month"))
"""Each window's key in ``Spend`` and the JSON, and its words."""


def _periods(s: Spend) -> Iterator[tuple[str, str, Period]]:
    for key, words in _WINDOWS:
        yield key, words, getattr(s, key)


def _finite(value: float | None) -> float | None:
    """A number JSON can carry: no bound (inf) is null."""
    return None if value is None or math.isinf(value) else value


def _tally_json(t: Tally) -> dict[str, Any]:
    return {
        "runs": t.runs,
        "live": t.live,
        "gpu_hours": t.gpu_hours,
        "cost": t.cost,
        "unpriced_gpu_hours": t.unpriced_gpu_hours,
        "open_gpu_hours": _finite(t.open_gpu_hours),
        "open_cost": _finite(t.open_cost),
    }


def spend_json(s: Spend, budget: BudgetConfig) -> dict[str, Any]:
    """``spend --json``: ``now``, ``timezone`` (null: this machine's local time), ``day``, ``week`` and ``month``
    (each ``start``, ``total`` and ``lanes``, a tally each: ``runs``, ``live``, ``gpu_hours``, ``cost`` (null: no
    run of it has a price), ``unpriced_gpu_hours``, ``open_gpu_hours`` and ``open_cost``, what its live runs may
    still add at worst (null: unbounded, a live run has no time limit; or no price)), and ``budget``: the
    ``[budget]`` limits (null when none is set)."""
    out: dict[str, Any] = {"now": iso_utc(s.now), "timezone": budget.timezone, "currency": budget.currency}
    for key, _, period in _periods(s):
        out[key] = {
            "start": iso_utc(period.start),
            "total": _tally_json(period.total),
            "lanes": {name: _tally_json(t) for name, t in period.lanes.items()},
        }
    out["budget"] = (
        {
            "paid_gpu_hours_per_day": budget.paid_gpu_hours_per_day,
            "paid_cost_per_month": budget.paid_cost_per_month,
            "max_paid_gpu_hours_per_job": budget.max_paid_gpu_hours_per_job,
            "on_budget": budget.on_budget,
        }
        if budget.limited
        else None
    )
    return out


def _cost_cell(t: Tally) -> str:
    """The cost so far, with the GPU-hours of runs whose lane has no price (in no cost) said beside it."""
    if t.cost is None:
        return "unpriced"
    unpriced = f" (+ {hours_words(t.unpriced_gpu_hours)} GPU-h unpriced)" if t.unpriced_gpu_hours else ""
    return cost_words(t.cost) + unpriced


def _open_cell(t: Tally) -> str:
    """What the live runs may still add at worst: ``≤ 8 GPU-h / ≤ 20.00``; nothing live: ``-``."""
    if not t.live:
        return "-"
    if math.isinf(t.open_gpu_hours):
        return "unbounded (a live run has no time limit)"
    hours = f"≤ {hours_words(t.open_gpu_hours)} GPU-h"
    return hours if t.open_cost is None else f"{hours} / ≤ {cost_words(t.open_cost)}"


def _still_open(t: Tally) -> str:
    """``, ≤ 8 GPU-h / ≤ 20.00 still open`` while a run is live, else nothing."""
    return f", {_open_cell(t)} still open" if t.live else ""


def _limit_lines(s: Spend, budget: BudgetConfig) -> list[Text]:
    """One line per ``[budget]`` limit: what counts against it now (what ran, plus the live runs' worst case)."""
    lines = []
    day, month = s.day.total, s.month.total
    if budget.paid_gpu_hours_per_day is not None:
        limit = budget.paid_gpu_hours_per_day
        used = day.worst_gpu_hours
        left = "none left" if used >= limit else f"{hours_words(limit - used)} left"
        lines.append(
            Text(
                f"[budget] paid_gpu_hours_per_day = {hours_words(limit)}: {hours_words(used)} counted today "
                f"({hours_words(day.gpu_hours)} ran{_still_open(day)}); {left}"
            )
        )
    if budget.paid_cost_per_month is not None:
        limit = budget.paid_cost_per_month
        worst = month.worst_cost or 0.0
        left = "none left" if worst >= limit else f"{budget.money(cost_words(limit - worst))} left"
        lines.append(
            Text(
                f"[budget] paid_cost_per_month = {budget.money(cost_words(limit))}: {budget.money(cost_words(worst))} "
                f"counted this month ({budget.money(cost_words(month.cost or 0.0))} spent{_still_open(month)}); "
                f"{left}"
            )
        )
    if budget.max_paid_gpu_hours_per_job is not None:
        cap = hours_words(budget.max_paid_gpu_hours_per_job)
        lines.append(Text(f"[budget] max_paid_gpu_hours_per_job = {cap}: a job whose limit needs more is not paid"))
    if lines:
        then = "waits on its last free rung" if budget.on_budget == "wait" else "ends NO_BUDGET"
        lines.append(Text(f"a handoff that would pass a limit is not made: the dispatch {then}", style="dim"))
    return lines


def spend_table(s: Spend, budget: BudgetConfig) -> RenderableType:
    """Today, this week and this month: each lane's runs, live runs, GPU-hours, cost and what is still open (the
    live runs' worst case), and all lanes' together when there are several; when each window began; then the
    ``[budget]`` limits, if set. Fits 80 columns."""
    table = Table(title="paid runs, by when their handoff began", title_justify="left", box=None, padding=(0, 1))
    cost = f"cost ({budget.currency})" if budget.currency else "cost"
    for header in ("window", "lane", "runs", "live", "GPU-h", cost, "still open, at worst"):
        table.add_column(header, no_wrap=header not in (cost, "still open, at worst"))
    began = []
    for _, words, period in _periods(s):
        began.append(f"{words} {datetime.fromtimestamp(period.start, budget.zone).strftime('%a %Y-%m-%d %H:%M')}")
        rows = [*period.lanes.items(), ("all", period.total)] if len(period.lanes) != 1 else [*period.lanes.items()]
        for i, (lane, t) in enumerate(rows):
            cells = (words if i == 0 else "", lane, str(t.runs), str(t.live), hours_words(t.gpu_hours))
            table.add_row(*cells, _cost_cell(t), _open_cell(t), style="bold" if lane == "all" else None)
    zone = budget.timezone or "this machine's local time"
    since = Text(f"since: {'; '.join(began)} ({zone})", style="dim")
    return Group(table, since, *_limit_lines(s, budget))


def _remember(config: Config) -> None:
    """Journal this config's [budget] for the driver if it may change it (driver/budget.py: only from the config it
    came from), said in one line; a journal that cannot be written keeps the driver's, said too."""
    try:
        with open_journal(config) as journal:
            said = remember_budget(config, journal, at=time.time(), applied=driver_budget(journal))
    except FellowsError as exc:
        click.echo(f"fellows-fsm: warning: the driver keeps the [budget] it had: {exc}", err=True)
        return
    if said is not None:
        click.echo(f"fellows-fsm: note: {said}", err=True)


@main.command(short_help="What the paid lanes spent and the free clusters gave: today, this week, this month.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--scope",
    type=click.Choice(["user", "team"]),
    default=None,
    help="Read the shared [ledger] instead of this journal: this user on every machine, or the whole team.",
)
@config_option
@click.pass_context
def spend(ctx: click.Context, as_json: bool, scope: str | None) -> None:
    """What the paid runs cost today, this week and this month (GPU-hours and cost, per lane), what the live ones
    may still add at worst, and the [budget] limits; then the free clusters' GPU-hours (the jobs that ended there)
    and what they saved at the price of the first paid lane of [router] order. A paid run counts, all of it, in the
    day, week and month its handoff began ([budget] timezone). Like submit, it gives the journal's driver this
    config's [budget] (a raised one lets a waiting dispatch through at its next tick); otherwise it only reads the
    journal. With --scope user|team it reads the shared [ledger] instead: the paid per user and lane, the free
    per user and cluster."""
    config = config_of(ctx)
    if scope is not None:
        ledger, totals, rows, shared = read_shared_spend(config, scope)
        if as_json:
            echo_json(shared_spend_json(ledger, scope, totals, rows, config.budget, free=shared))
        else:
            make_console().print(shared_spend_table(ledger, scope, totals, rows, config.budget, free=shared))
        return
    known = config.journal_path.exists()  # no journal yet: no driver to tell, and none is made here
    with open_journal(config, readonly=True) as journal:
        changed = known and (journaled_budget(journal) or BudgetConfig()) != config.budget
    if changed:
        _remember(config)
    with open_journal(config, readonly=True) as journal:
        budget = journaled_budget(journal) or config.budget  # the one the driver applies
        s = read_spend(journal, budget)
        free = read_free(journal, config, s.now)  # what the free clusters gave (ui/free.py)
    if as_json:
        echo_json({**spend_json(s, budget), "free": free_json(free)})
    else:
        make_console().print(Group(spend_table(s, budget), Text(""), free_table(free, budget.currency or "")))
