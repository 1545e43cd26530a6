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
from fellows_fsm.driver.ledger import LedgerGate
from fellows_fsm.errors import ConfigError
from fellows_fsm.ledger.store import LiveRow, SpendRow, Totals
from fellows_fsm.ui.paid import cost_words, hours_words

__all__ = ["read_shared_spend", "read_team", "shared_spend_json", "shared_spend_table", "team_json", "team_table"]

_WINDOWS = (("day", "today"), ("week", "this week"), ("month", "this month"))


def read_shared_spend(config: Config, scope: str) -> tuple[LedgerConfig, Totals, list[SpendRow]]:
    """The ledger's rows of ``scope`` (``user``: this user on every machine; ``team``: the [ledger] team), in the
    [budget]'s zone; ConfigError when there is no [ledger] (or no team for ``team``), LedgerRefused or
    LedgerUnreachable when it cannot be read."""
    ledger = config.ledger
    if ledger is None:
        raise ConfigError(f"{config.source}: spend --scope {scope} reads the shared ledger, and there is no [ledger]")
    if scope == "team" and ledger.team is None:
        raise ConfigError(f"{config.source}: spend --scope team needs [ledger] team = '<your team>'")
    gate = LedgerGate(ledger, config.journal_path)
    try:
        totals, rows = gate.ledger.spend(gate.who, team_scope=scope == "team", zone=config.budget.timezone)
    finally:
        gate.close()
    return ledger, totals, rows


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
    long ago its driver published it)."""
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
            }
            for r in rows
        ],
    }


def team_table(ledger: LedgerConfig, rows: Sequence[LiveRow]) -> RenderableType:
    """Each live dispatch of the team: user, machine, id, name, where it stands, and how old that word is."""
    who = f"team {ledger.team}" if ledger.team is not None else f"user {ledger.user}"
    table = Table(title=f"live dispatches of {who} in {ledger.shown}", title_justify="left", box=None, padding=(0, 1))
    for header in ("user", "machine", "id", "name", "state", "seen"):
        table.add_column(header, no_wrap=header != "name")
    for r in rows:
        table.add_row(r.user, r.machine, r.dispatch_id, r.name, r.label, f"{r.age_seconds:.0f} s ago")
    if not rows:
        return Group(table, Text("no live dispatch published", style="dim"))
    return Group(table, Text("as each driver last published it (every 30 s, and when it stops)", style="dim"))


def shared_spend_json(
    ledger: LedgerConfig, scope: str, totals: Totals, rows: Sequence[SpendRow], budget: BudgetConfig
) -> dict[str, Any]:
    """``spend --scope ... --json``: ``scope``, ``ledger`` (its URL redacted), ``team``, ``user``, ``now`` (the
    ledger server's clock), ``timezone``, ``currency``; per window (``day``, ``week``, ``month``) its ``rows``
    (``user``, ``lane``, ``runs``, ``live``, ``gpu_hours``, ``cost``: null when none of them has a price); and
    ``budget``: what the gate counts now against this machine's limits (``day_gpu_hours``, ``month_cost``, the
    limits)."""
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
    return out


def shared_spend_table(
    ledger: LedgerConfig, scope: str, totals: Totals, rows: Sequence[SpendRow], budget: BudgetConfig
) -> RenderableType:
    """Each window's rows (user, lane, runs, live, GPU-hours, cost: ended runs at what they ran, live ones at their
    worst case), then what the gate counts against this machine's limits. Fits 80 columns."""
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
    return Group(*lines)
