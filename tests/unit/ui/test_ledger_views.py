"""The shared ledger's views (ui/ledger.py) at 80 columns: ``status --team`` with a live row and one its killed
driver left (stale: shown with its age, never as live) and ``spend --scope team`` with the paid handoffs and the
free GPU-hours per user and cluster; no line wider than the terminal, every dispatch id whole."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.ledger.store import LiveRow, SpendRow, Totals
from fellows_fsm.ui.free import shared_free
from fellows_fsm.ui.ledger import STALE_AFTER_SECONDS, shared_spend_json, shared_spend_table, team_json, team_table

LEDGER = LedgerConfig(url="postgresql://fellows@ledger.lab.example.org:5432/fellows", user="alice", team="lab")
BUDGET = BudgetConfig(paid_gpu_hours_per_day=25, paid_cost_per_month=5000, currency="EUR")


def _render(renderable: RenderableType, width: int = 80) -> list[str]:
    console = Console(file=io.StringIO(), width=width)
    console.print(renderable)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue().splitlines()


def _live(dispatch_id: str, age: float) -> LiveRow:
    return LiveRow(
        user="alexandra", machine="gpu-workstation-07.lab.example.org", journal="/home/alexandra/journal.sqlite3",
        dispatch_id=dispatch_id, name="a-rather-long-experiment-name-sweep-042", state="RUNG",
        label="QUEUED(normal-eur)", lane="fellows", qos="normal-eur", outcome="", age_seconds=age,
    )  # fmt: skip


def test_status_team_marks_a_row_its_killed_driver_left_stale_and_fits_80_columns() -> None:
    """A row published 12 s ago is live; one published 10 minutes ago (its driver was SIGKILLed) reads "stale" with
    its age, in the table and the JSON; a line under the table says what stale means. Every line fits 80."""
    rows = [_live("0123456789ab", 12.0), _live("ba9876543210", 600.0)]
    lines = _render(team_table(LEDGER, rows))
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    for dispatch_id in ("0123456789ab", "ba9876543210"):
        assert dispatch_id in text
    [fresh] = [line for line in lines if "0123456789ab" in line]
    [old] = [line for line in lines if "ba9876543210" in line]
    assert "stale" not in fresh
    assert "stale" in old
    assert "10m" in old
    assert any(line.startswith("1 stale: published over") for line in lines), text
    assert [d["stale"] for d in team_json(LEDGER, rows)["dispatches"]] == [False, True]
    assert STALE_AFTER_SECONDS < 600.0


def test_spend_scope_team_shows_paid_and_free_per_user_and_fits_80_columns() -> None:
    """The paid handoffs per user and lane, then the free GPU-hours per user and cluster and what they saved at the
    price lane's price: every line fits 80 columns, and the JSON carries the same per user."""
    config = Config(lanes=(CommandSettings(name="gcp", command=("x",), price_per_gpu_hour=2.5),))
    paid = [SpendRow(w, "alexandra", "gcp-batch-europe", 3, 1, 24.5, 271.0) for w in ("day", "week", "month")]
    free_rows = [
        (w, u, c, n, h)
        for w in ("day", "week", "month")
        for u, c, n, h in (("alexandra", "fellows-cluster", 12, 96.25), ("bartholomew", "inst-cluster", 3, 24.0))
    ]
    free = shared_free(free_rows, config)
    totals = Totals(24.5, 271.0, 0.0)
    lines = _render(shared_spend_table(LEDGER, "team", totals, paid, BUDGET, free=free))
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    assert "bartholomew" in text
    assert "inst-cluster" in text
    out = shared_spend_json(LEDGER, "team", totals, paid, BUDGET, free=free)
    users = out["free"]["day"]["users"]
    assert [(u["user"], u["cluster"], u["jobs"]) for u in users] == [
        ("alexandra", "fellows-cluster", 12),
        ("bartholomew", "inst-cluster", 3),
    ]
    assert out["free"]["day"]["gpu_hours"] == 96.25 + 24.0
    assert (out["free"]["price_lane"], out["free"]["price_per_gpu_hour"]) == ("gcp", 2.5)
    assert out["free"]["day"]["saved"] == (96.25 + 24.0) * 2.5
    assert users[0]["saved"] == 96.25 * 2.5
    assert "saved: at gcp's 2.50" in text
