"""One dispatch as a user sees it (ui/snapshot.py): the keys of status --json and the state in words."""

from __future__ import annotations

import json
from pathlib import Path

from fellows_fsm import SubmitRejected
from tests.unit.cli_helpers import DISPATCH_KEYS, SchedulingFake, refused, run


def test_status_lists_dispatches_with_the_documented_keys(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """status --json is a list of objects with the dispatch keys; the table names each dispatch."""
    scheduling_fake.scheduling = False
    ids = [run("submit", "--detach", str(script)).stdout.strip() for _ in range(2)]
    result = run("status", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [r["dispatch_id"] for r in rows] == ids
    assert all(r.keys() >= DISPATCH_KEYS for r in rows)
    assert all(r["state"] == "SUBMITTED(high-eur)" for r in rows)
    table = run("status").stdout
    assert all(i in table for i in ids)


def test_a_handed_off_dispatch_reads_handed_off_not_failed(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """status says HANDED_OFF on lane gcp with no current QoS; --json says the same state, with the outcome."""
    scheduling_fake.scheduling = False
    out = json.loads(run("submit", "--json", str(script)).stdout)
    assert (out["state"], out["outcome"]) == ("HANDED_OFF", "handed-off")
    table = run("status").stdout
    assert "HANDED_OFF" in table
    assert "FAILED_TO_GCP" not in table
    assert "low-eur" not in table


def test_a_refused_dispatch_reads_refused(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """A first submit SLURM refuses exits 5, and status then says REFUSED, not SUBMITTED(high-eur)."""
    scheduling_fake.fail_next_submit(SubmitRejected("Requested node configuration is not available"))
    result = run("submit", str(script))
    refused(result, 5, "Requested node configuration is not available")
    table = run("status").stdout
    assert "REFUSED" in table
    assert "SUBMITTED(high-eur)" not in table
