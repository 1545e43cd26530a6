"""The real-graham workload (fellows_fsm/sim/real_workload.py): jobs drawn from the table derived from real SLURM
data, and ``fellows-fsm simulate --workload real-graham``."""

from __future__ import annotations

import json
from collections import Counter

from click.testing import CliRunner

from fellows_fsm.cli import main
from fellows_fsm.sim.real_workload import GRAHAM_2021, real_trace
from fellows_fsm.sim.trace import QOS_MAX_WALL_SECONDS


def test_real_trace_is_seeded_and_every_limit_holds_its_run_time_within_the_qos_maximum() -> None:
    """The same seed gives the same jobs; every limit is at least the run time and at most the QoS's MaxWall."""
    jobs = real_trace(seed=3, hours=24)
    assert jobs == real_trace(seed=3, hours=24)
    assert jobs != real_trace(seed=4, hours=24)
    assert any(j.mine for j in jobs)
    for job in jobs:
        assert job.duration <= job.limit <= QOS_MAX_WALL_SECONDS.get(job.qos or "high-eur", 7 * 86_400.0)


def test_real_trace_draws_gpus_and_round_limits_as_the_table_says() -> None:
    """Over many jobs the GPUs mix is the table's (1 GPU near 87 %), and most limits take the table's round values."""
    jobs = real_trace(seed=1, hours=24 * 20, background_load=1.0)
    sizes = Counter(j.gpus for j in jobs)
    assert set(sizes) <= {g for g, _ in GRAHAM_2021["gpus"]}  # type: ignore[attr-defined]
    assert 0.82 <= sizes[1] / len(jobs) <= 0.92
    rounds = {float(v) for v, _ in GRAHAM_2021["round_limits"]}  # type: ignore[attr-defined]
    at_round = sum(1 for j in jobs if j.limit in rounds) / len(jobs)
    assert at_round >= 0.6


def test_simulate_plays_the_real_graham_workload() -> None:
    """``simulate --workload real-graham`` plays the drawn workload: its results differ from the synthetic one's."""
    args = ["simulate", "--hours", "12", "--park-caps", "300", "--strategies", "ladder", "--json"]
    real = CliRunner().invoke(main, [*args, "--workload", "real-graham"])
    synthetic = CliRunner().invoke(main, args)
    assert real.exit_code == 0, real.output
    assert synthetic.exit_code == 0
    assert json.loads(real.stdout) != json.loads(synthetic.stdout)
