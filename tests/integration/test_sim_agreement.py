"""The simulator against reality: one small trace through the real Router on the local SLURM and in the sim."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.agreement import CAP, ESTIMATE_TRACE, TRACE, compare, replay_real, replay_sim

from fellows_fsm.sim.trace import load_trace

from .conftest import Cluster

pytestmark = pytest.mark.slurm


def test_the_simulator_places_every_job_where_the_real_router_did(slurm: Cluster) -> None:
    """Replayed on real SLURM and in the simulator, the agreement trace runs each job on the same QoS (or GCP)."""
    trace = load_trace(TRACE)
    result = compare(replay_real(trace), replay_sim(trace))
    disagreements = [row for row in result["jobs"] if not row["agree"]]  # type: ignore[attr-defined]
    assert disagreements == []
    assert result["free_share_gap"] == 0.0


@pytest.mark.parametrize(("path", "cap"), [(TRACE, CAP), (ESTIMATE_TRACE, 30.0)], ids=["agreement", "estimate-decides"])
def test_with_park_early_estimate_each_job_runs_on_the_same_rung(slurm: Cluster, path: Path, cap: float) -> None:
    """With park_early='estimate', real SLURM and the simulator run each job of the trace on the same QoS (or GCP)."""
    trace = load_trace(path)
    result = compare(
        replay_real(trace, cap=cap, park_early="estimate"), replay_sim(trace, cap=cap, park_early="estimate")
    )
    disagreements = [row for row in result["jobs"] if not row["agree"]]  # type: ignore[attr-defined]
    assert disagreements == []


def test_in_the_estimate_trace_the_estimate_decides(slurm: Cluster) -> None:
    """On real SLURM the estimate trace's first job runs on low-eur with 'estimate' and on high-eur with 'off'."""
    trace = load_trace(ESTIMATE_TRACE)
    estimate = replay_real(trace, cap=30.0, park_early="estimate")
    off = replay_real(trace, cap=30.0, park_early="off")
    assert (estimate.outcomes[0].qos, off.outcomes[0].qos) == ("low-eur", "high-eur")
