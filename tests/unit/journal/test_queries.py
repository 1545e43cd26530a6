"""The queries the views use (journal/queries.py), through the commands that run them: a dispatch by a prefix of its id,
the status rows (the live and the recent ones), a handed-off dispatch refused for cancel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli_helpers import _count_parsed_rows, _journal_of, one_error_line, run


def test_status_of_an_unknown_dispatch_is_a_usage_error(env: Path) -> None:
    """An unknown dispatch id exits 2 and points at `fellows-fsm status`."""
    result = run("status", "nosuchid")
    assert result.exit_code == 2
    assert "fellows-fsm status" in result.stderr


def test_status_shows_the_live_and_the_recent_dispatches_by_default(env: Path) -> None:
    """By default status lists every live dispatch and the 20 most recent, and says how many it left out."""
    ids = _journal_of(env, 30, live=2)
    rows = json.loads(run("status", "--json").stdout)
    assert [r["dispatch_id"] for r in rows] == ids[:2] + ids[-20:]
    table = run("status")
    assert table.exit_code == 0, table.output
    assert "22 of 30 dispatches shown (the live ones and the 20 most recent); --all shows every one" in table.stdout
    assert [r["dispatch_id"] for r in json.loads(run("status", "--json", "--last", "3").stdout)] == [
        *ids[:2],
        *ids[-3:],
    ]
    assert len(json.loads(run("status", "--json", "--all").stdout)) == 30
    assert [r["dispatch_id"] for r in json.loads(run("status", "--json", "--live").stdout)] == ids[:2]


def test_status_finds_a_dispatch_by_a_prefix_of_its_id(env: Path) -> None:
    """A unique prefix of an id selects that dispatch; a shared prefix is a usage error listing the matches."""
    ids = _journal_of(env, 12, live=0)
    [row] = json.loads(run("status", "11", "--json").stdout)
    assert row["dispatch_id"] == ids[11]
    result = run("status", "0")
    assert result.exit_code == 2
    assert "matches several dispatches" in result.stderr


def test_history_of_a_prefix_parses_only_the_matching_row(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """history <prefix> on a journal of 30 dispatches parses one dispatch row: the one it shows."""
    ids = _journal_of(env, 30, live=0)
    parsed = _count_parsed_rows(monkeypatch)
    result = run("history", "11", "--json")
    assert result.exit_code == 0, result.output
    assert [e["trigger"] for e in json.loads(result.stdout)] == ["submit", "start", "end"]
    assert parsed == [ids[11]]


def test_cancel_a_handed_off_dispatch_is_refused(env: Path, script: Path) -> None:
    """A dispatch already handed to gcp cannot be taken back: exit 1 naming the lane."""
    dispatch_id = json.loads(run("submit", "--pin", "gcp", "--json", str(script)).stdout)["dispatch_id"]
    result = run("cancel", dispatch_id)
    assert result.exit_code == 1
    assert "handed to lane gcp" in one_error_line(result)
