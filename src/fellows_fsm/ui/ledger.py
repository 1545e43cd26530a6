"""What the shared ledger (``[ledger]``) shows: ``spend --scope user|team`` (what one budget shared across machines
committed today, this week and this month, per user and lane, with the limits this machine's ``[budget]`` applies)
and ``status --team`` (every driver's live dispatches as it last published them). The rows are ledger/store.py's
(``Ledger.spend``, ``Ledger.live``, in the server's clock); here are only the tables and the JSON objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.clock import iso_utc
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.driver.ledger import LIVE_EVERY_SECONDS, LedgerGate
from fellows_fsm.errors import ConfigError
from fellows_fsm.ledger.store import LiveRow, SpendRow, Totals
from fellows_fsm.ui.free import FreeHours, free_json, free_table, shared_free
from fellows_fsm.ui.paid import cost_words, hours_words
from fellows_fsm.ui.words import span

__all__ = [
    "STALE_AFTER_SECONDS",
    "read_shared_spend",
    "read_team",
    "shared_spend_json",
    "shared_spend_table",
    "team_json",
    "team_table",
]

_WINDOWS = (("day", "today"), ("week", "this week"), ("month", "this month"))
STALE_AFTER_SECONDS = 3 * LIVE_EVERY_SECONDS
"""A live row published longer ago than this is stale: its driver stopped without saying so (killed), or cannot
reach the ledger; it is shown as such, with its age, never as live."""


def read_shared_spend(config: Config, scope: str) -> tuple[LedgerConfig, Totals, list[SpendRow], FreeHours]:
    """The ledger's rows of ``scope`` (``user``: this user on every machine; ``team``: the [ledger] team), in the
    [budget]'s zone: the paid handoffs, and the free jobs' GPU-hours per user and cluster (ui/free.py, "saved" at
    this config's price lane); ConfigError when there is no [ledger] (or no team for ``team``), LedgerRefused or
    LedgerUnreachable when it cannot be read."""
    ledger = config.ledger
    if ledger is None:
        raise ConfigError(f"{config.source}: spend --scope {scope} reads the shared ledger, and there is no [ledger]")
    if scope == "team" and ledger.team is None:
        raise ConfigError(f"{config.source}: spend --scope team needs [ledger] team = '<your team>'")
    gate = LedgerGate(ledger, config.journal_path)
    try:
        team_scope, zone = scope == "team", config.budget.timezone
        totals, rows = gate.ledger.spend(gate.who, team_scope=team_scope, zone=zone)
        free = gate.ledger.free(gate.who, team_scope=team_scope, zone=zone)
    finally:
        gate.close()
    return ledger, totals, rows, shared_free(free, config)


def read_team(config: Config) -> tuple[LedgerConfig, list[LiveRow]]:
    """Every live dispatch the drivers of the [ledger] team (of this user, with no team) last published."""
    ledger = config.ledger
    if ledger is None:
        raise ConfigError(f"{config.source}: status --team reads the shared ledger, and there is no [ledger]")
    gate = LedgerGate(ledger, config.journal_path)
    try:
        return ledger, gate.ledger.live(gate.who, team_scope=ledger.team is not None)
    finally:
        gate.close()


def team_json(ledger: LedgerConfig, rows: Sequence[LiveRow]) -> dict[str, Any]:
    """``status --team --json``: ``ledger`` (redacted), ``team``, and ``dispatches``: each ``user``, ``machine``,
    ``journal``, ``dispatch_id``, ``name``, ``state``, ``label``, ``lane``, ``qos``, ``outcome``, ``age_seconds`` (how
    long ago its driver published it), ``stale`` (published more than ``STALE_AFTER_SECONDS`` ago: its driver was
    killed or cannot reach the ledger, so it may not be live)."""
    return {
        "ledger": ledger.shown,
        "team": ledger.team,
        "dispatches": [
            {
                "user": r.user,
                "machine": r.machine,
                "journal": r.journal,
                "dispatch_id": r.dispatch_id,
                "name": r.name,
                "state": r.state,
                "label": r.label,
                "lane": r.lane,
                "qos": r.qos,
                "outcome": r.outcome,
                "age_seconds": round(r.age_seconds, 1),
                "stale": r.age_seconds > STALE_AFTER_SECONDS,
            }
            for r in rows
        ],
    }


def team_table(ledger: LedgerConfig, rows: Sequence[LiveRow]) -> RenderableType:
    """Each live dispatch of the team: user, machine, id, name, where it stands (``stale:`` first when its driver
    has not published it for ``STALE_AFTER_SECONDS``), and how old that word is. Fits 80 columns."""
    who = f"team {ledger.team}" if ledger.team is not None else f"user {ledger.user}"
    table = Table(title=f"live dispatches of {who} in {ledger.shown}", title_justify="left", box=None, padding=(0, 1))
    # At 80 columns: the id whole, the machine cut (its journal is in the JSON), the rest wrapped, never dropped.
    table.add_column("user", overflow="fold", max_width=10)
    table.add_column("machine", no_wrap=True, overflow="ellipsis", max_width=12)
    table.add_column("id", no_wrap=True, min_width=12)
    table.add_column("name", overflow="fold", min_width=8)
    table.add_column("state", overflow="fold", min_width=18)  # QUEUED(normal-eur) on one line
    table.add_column("age", no_wrap=True, min_width=4)  # how long ago its driver published it
    stale = 0
    for r in rows:
        old = r.age_seconds > STALE_AFTER_SECONDS
        stale += old
        state = Text(f"stale: {r.label}", style="yellow") if old else Text(r.label)
        table.add_row(r.user, r.machine, r.dispatch_id, r.name, state, _age(r.age_seconds))
    if not rows:
        return Group(table, Text("no live dispatch published", style="dim"))
    lines: list[RenderableType] = [
        table,
        Text("as each driver last published it (every 30 s, and when it stops)", style="dim"),
    ]
    if stale:
        lines.append(
            Text(
                f"{stale} stale: published over {span(STALE_AFTER_SECONDS)} ago, so its driver was killed or cannot "
                "reach the ledger (its next start publishes again)",
                style="yellow",
            )
        )
    return Group(*lines)


def _age(seconds: float) -> str:
    """An age in one short word: ``12s``, ``10m``, ``3h``, ``2d`` (rounded down)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size if unit == "m" else seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def shared_spend_json(
    ledger: LedgerConfig,
    scope: str,
    totals: Totals,
    rows: Sequence[SpendRow],
    budget: BudgetConfig,
    *,
    free: FreeHours | None = None,
) -> dict[str, Any]:
    """``spend --scope ... --json``: ``scope``, ``ledger`` (its URL redacted), ``team``, ``user``, ``now`` (the
    ledger server's clock), ``timezone``, ``currency``; per window (``day``, ``week``, ``month``) its ``rows``
    (``user``, ``lane``, ``runs``, ``live``, ``gpu_hours``, ``cost``: null when none of them has a price); and
    ``budget``: what the gate counts now against this machine's limits (``day_gpu_hours``, ``month_cost``, the
    limits); ``free``: the free clusters' GPU-hours per window, user and cluster, and what they saved (ui/free.py:
    ``free_json``)."""
    out: dict[str, Any] = {
        "scope": scope,
        "ledger": ledger.shown,
        "team": ledger.team,
        "user": ledger.user,
        "now": iso_utc(totals.now),
        "timezone": budget.timezone,
        "currency": budget.currency,
    }
    for key, _ in _WINDOWS:
        out[key] = [
            {"user": r.user, "lane": r.lane, "runs": r.runs, "live": r.live, "gpu_hours": r.gpu_hours, "cost": r.cost}
            for r in rows
            if r.window == key
        ]
    out["budget"] = {
        "day_gpu_hours": totals.day_gpu_hours,
        "month_cost": totals.month_cost,
        "paid_gpu_hours_per_day": budget.paid_gpu_hours_per_day,
        "paid_cost_per_month": budget.paid_cost_per_month,
    }
    if free is not None:
        out["free"] = free_json(free)
    return out


def shared_spend_table(
    ledger: LedgerConfig,
    scope: str,
    totals: Totals,
    rows: Sequence[SpendRow],
    budget: BudgetConfig,
    *,
    free: FreeHours | None = None,
) -> RenderableType:
    """Each window's rows (user, lane, runs, live, GPU-hours, cost: ended runs at what they ran, live ones at their
    worst case), then what the gate counts against this machine's limits; then the free clusters' GPU-hours per
    user and cluster and what they saved (ui/free.py: ``free_table``). Fits 80 columns."""
    who = f"team {ledger.team}" if scope == "team" else f"user {ledger.user}"
    table = Table(title=f"paid handoffs of {who} in {ledger.shown}", title_justify="left", box=None, padding=(0, 1))
    cost = f"cost ({budget.currency})" if budget.currency else "cost"
    for header in ("window", "user", "lane", "runs", "live", "GPU-h", cost):
        table.add_column(header, no_wrap=True)
    for key, words in _WINDOWS:
        for i, r in enumerate(x for x in rows if x.window == key):
            money = "unpriced" if r.cost is None else cost_words(r.cost)
            cells = (words if i == 0 else "", r.user, r.lane or "-", str(r.runs), str(r.live))
            table.add_row(*cells, hours_words(r.gpu_hours), money)
    zone = budget.timezone or "the ledger server's time zone"
    lines: list[RenderableType] = [
        table,
        Text(f"live handoffs count at their worst case; windows in {zone}, by the ledger's clock", style="dim"),
    ]
    if budget.paid_gpu_hours_per_day is not None:
        lines.append(
            Text(
                f"[budget] paid_gpu_hours_per_day = {hours_words(budget.paid_gpu_hours_per_day)}: "
                f"{hours_words(totals.day_gpu_hours)} counted today"
            )
        )
    if budget.paid_cost_per_month is not None:
        lines.append(
            Text(
                f"[budget] paid_cost_per_month = {budget.money(cost_words(budget.paid_cost_per_month))}: "
                f"{budget.money(cost_words(totals.month_cost))} counted this month"
            )
        )
    if not rows:
        lines.insert(1, Text("no paid handoff this week or this month", style="dim"))
    if free is not None:
        lines += [Text(""), free_table(free, budget.currency or "")]
    return Group(*lines)
