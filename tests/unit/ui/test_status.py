"""The status table (ui/status.py), and the other views, within 80 columns; --all from the journal's listings."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.unit.cli_helpers import SchedulingFake, _count_parsed_rows, fill, run


@pytest.mark.parametrize("command", ["status", "history", "ladder"], ids=["status", "history", "ladder"])
def test_views_fit_80_columns(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """At 80 columns the status, history and ladder views keep every line within 80 and cut no word."""
    fill(scheduling_fake, "high-eur")
    walked = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    skipped = json.loads(run("submit", "--json", "--time", "10-00:00:00", str(script)).stdout)["dispatch_id"]
    monkeypatch.setenv("COLUMNS", "80")
    outputs = {
        "status": [run("status")],
        "history": [run("history", walked), run("history", skipped)],
        "ladder": [run("ladder", "--gpus", "32", "--time", "10-00:00:00")],
    }[command]
    for result in outputs:
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, result.stdout
        assert "…" not in result.stdout, result.stdout


def test_status_all_prints_the_default_table_without_parsing_rows(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status --all (from the journal's listings) prints what status prints when every dispatch is shown, a
    handed-off one on its lane included, and parses no row's JSON."""
    scheduling_fake.scheduling = False
    run("submit", "--json", str(script))
    for _ in range(2):
        run("submit", "--detach", str(script))
    # Compared once every walk has ended: with 0.3 s caps a slow machine walked a rung between the two views.
    end = time.monotonic() + 30
    while (default := run("status")).stdout.count("HANDED_OFF(gcp)") < 3:
        assert time.monotonic() < end, default.stdout
        time.sleep(0.05)
    parsed = _count_parsed_rows(monkeypatch)
    every = run("status", "--all")
    assert every.exit_code == 0, every.output
    assert every.stdout == default.stdout
    assert "HANDED_OFF(gcp)" in every.stdout
    assert parsed == []
