"""The simulator against reality: one small trace through the real Router on the local SLURM and in the sim."""

from __future__ import annotations

import pytest
from benchmarks.agreement import TRACE, compare, replay_real, replay_sim

from fellows_fsm.sim import load_trace

from .conftest import Cluster

pytestmark = pytest.mark.slurm


def test_the_simulator_places_every_job_where_the_real_router_did(slurm: Cluster) -> None:
    """Replayed on real SLURM and in the simulator, the agreement trace runs each job on the same QoS (or GCP)."""
    trace = load_trace(TRACE)
    result = compare(replay_real(trace), replay_sim(trace))
    disagreements = [row for row in result["jobs"] if not row["agree"]]  # type: ignore[attr-defined]
    assert disagreements == []
    assert result["free_share_gap"] == 0.0
