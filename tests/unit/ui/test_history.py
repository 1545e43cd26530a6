"""A dispatch's history (ui/history.py) through `fellows-fsm history`: every transition, with its reason."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli_helpers import HISTORY_KEYS, SchedulingFake, fill, run


def test_history_json_has_every_transition_with_reason(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """history --json lists submit, park (QOSMaxGRESPerUser), cancel, resubmit, start with UTC ISO times."""
    fill(scheduling_fake, "high-eur")
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    result = run("history", dispatch_id, "--json")
    assert result.exit_code == 0
    entries = json.loads(result.stdout)
    assert all(set(e) == HISTORY_KEYS for e in entries)
    assert [(e["trigger"], e["to"]) for e in entries] == [
        ("submit", "SUBMITTED(high-eur)"),
        ("park", "PARKED"),
        ("cancel", "CANCELLED"),
        ("resubmit", "RESUBMITTED(normal-eur)"),
        ("start", "RUNNING"),
    ]
    assert entries[0]["from"] is None
    assert entries[1]["reason"] == "QOSMaxGRESPerUser"
    assert entries[0]["slurm_job_id"] is not None
    assert entries[3]["slurm_job_id"] not in (None, entries[0]["slurm_job_id"])
    assert all(e["at"].endswith("+00:00") for e in entries)
    table = run("history", dispatch_id).stdout
    assert "your own high-eur GPU cap is full" in table
