"""What differs between the SLURM versions the product supports (22.05, 24.11), on the real local SLURM."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.journal.history import history_entries
from fellows_fsm.journal.snapshot import Snapshot
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import Phase
from fellows_fsm.testing import Driven
from fellows_fsm.ui.history import history_table
from fellows_fsm.ui.live import dispatch_panel

from .conftest import Cluster

pytestmark = pytest.mark.slurm

CAP_WORDS = "your own high-eur GPU cap is full"
# Fine enough to see the main scheduler's short-lived reason on 24.11 (about 0.1 s in every second).
FINE_TICK = 0.05


def _text(renderable: object) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_own_cap_reason_stays_across_backfill_passes_on_a_full_node(slurm: Cluster, tmp_path: Path) -> None:
    """With the node full and high-eur's own cap full, the live view and history keep the cap as the reason."""
    # On 24.11 squeue shows QOSMaxGRESPerUser after a main-scheduler pass and None after each backfill pass:
    # the test checks that squeue really did blank it there, and that the product never did.
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("low-eur", 48)  # the rest of the node's 64 GPUs: nothing is free anywhere
    port = slurm.port()
    version = port.scancel_version()
    journal = Journal(tmp_path / "journal.sqlite3")
    ladder = SlurmSettings(qos="high-eur", qos_ladder=["normal-eur"], park_cap_seconds=8.0).ladder
    dispatch = Driven(Dispatch(f"it{uuid.uuid4().hex[:8]}", slurm.spec(gpus=8), ladder), port, journal)
    journal.add_dispatch(
        dispatch.id, dispatch.spec, dispatch.ladder, pinned=dispatch.pinned, intent="prod", at=time.time()
    )
    try:
        dispatch.submit()
        first_job = dispatch.job_id
        assert first_job is not None
        raw_after: list[str] = []  # squeue's own reason, once the product has seen the cap
        views_after: list[str] = []  # the live view's words, likewise
        known = False
        end = time.monotonic() + 30
        while dispatch.rung_index == 0:
            assert time.monotonic() < end, f"the dispatch did not park within 30 s ({dispatch.label})"
            seen = port.observe([first_job])[first_job]
            dispatch.advance(seen)
            if dispatch.rung_index != 0 or seen.phase is not Phase.PENDING:
                break
            known = known or seen.reason == "QOSMaxGRESPerUser"
            if known:
                views_after.append(_text(dispatch_panel(Snapshot.of_dispatch(dispatch), now=time.time())))
                raw_after.append(slurm.row(first_job).reason)
            time.sleep(FINE_TICK)

        assert known, "the product never saw QOSMaxGRESPerUser before the park"
        assert len(views_after) >= 10
        assert all(CAP_WORDS in view for view in views_after), next(v for v in views_after if CAP_WORDS not in v)
        if version >= (24, 11, 0):
            assert "None" in raw_after, f"squeue never blanked the reason on {version}: {set(raw_after)}"
        parks = [s for s in journal.steps(dispatch.id) if s.trigger == "park"]
        assert [(s.qos, s.reason) for s in parks] == [("high-eur", "QOSMaxGRESPerUser")]
        row = journal.dispatch(dispatch.id)
        assert row is not None
        entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
        assert CAP_WORDS in _text(history_table(row, entries))
    finally:
        journal.close()
