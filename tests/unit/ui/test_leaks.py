# ruff: noqa: F811 - the walked fixture comes from test_narrow
"""No internals in the views (issue 41 item 7): the seed's FAILED_TO_GCP reads FREE_LANES_DONE in text (its name
stays in --json and the table), and a dispatch pinned to a lane is not said to wait for a SLURM job."""

from __future__ import annotations

import json
import time

from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.snapshot import Snapshot
from fellows_fsm.ui.live import dispatch_panel
from fellows_fsm.ui.snapshot import shown_label
from tests.unit.cli_helpers import run
from tests.unit.ui.test_narrow import _render, walked  # noqa: F401 - a fixture


def test_the_views_name_no_gcp_for_the_end_of_the_free_lanes(walked: list[str]) -> None:
    """history's text says FREE_LANES_DONE where the ladder ended; its --json keeps the table's FAILED_TO_GCP."""
    text = run("history", walked[0]).stdout
    assert "FREE_LANES_DONE" in text
    assert "FAILED_TO_GCP" not in text
    steps = json.loads(run("history", walked[0], "--json").stdout)
    assert "FAILED_TO_GCP" in {step["to"] for step in steps}
    assert shown_label("RUNNING") == "RUNNING"


def test_a_dispatch_pinned_to_a_lane_waits_for_no_slurm_job() -> None:
    """The live view of a dispatch pinned to lane cloud says no SLURM job is queued for it, never 'not queued yet'."""
    row = DispatchRow(
        id="0123456789ab",
        spec={"name": "train", "script": "train.sbatch", "gpus": 8},
        ladder=[],
        pinned=True,
        intent="prod",
        state="HANDING_OFF",
        label="HANDING_OFF",
        qos=None,
        job_id=None,
        lane="cloud",
        created_at=time.time(),
        updated_at=time.time(),
        final=False,
        outcome="",
        settings={},
    )
    out = _render(dispatch_panel(Snapshot.of_row(row), now=time.time()), 80)
    assert "none: lane cloud runs it" in out
    assert "not queued yet" not in out
