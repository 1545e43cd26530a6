"""fellows_fsm.sim: a discrete-event model of SLURM clusters, driven by the real Router and Dispatch.

For what-if questions (which strategy, which park cap, how big a cluster, what a second cluster in the order does):
the simulated clusters and clock implement the Scheduler and Clock ports; the ladder itself is never re-implemented
here.
"""

from __future__ import annotations

from fellows_fsm.sim.clock import SIM_EPOCH, SimClock
from fellows_fsm.sim.cluster import SimCluster
from fellows_fsm.sim.clusters import ClusterParams, cluster_background, parse_cluster, parse_cluster_options
from fellows_fsm.sim.jobs import FELLOWS_TIERS, SimJob, Tier, parse_tier
from fellows_fsm.sim.report import RESULT_KEYS, format_table, to_json, to_records
from fellows_fsm.sim.results import JobOutcome, RunResult
from fellows_fsm.sim.run import run_sweep, simulate
from fellows_fsm.sim.strategies import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    SimParams,
    parse_park_caps,
    parse_strategies,
    strategy_config,
)
from fellows_fsm.sim.trace import (
    ME,
    TraceJob,
    dump_trace,
    load_trace,
    parse_trace,
    realistic_time_limits,
    synthetic_trace,
    with_time_limits,
)

__all__ = [
    "DEFAULT_STRATEGIES",
    "FELLOWS_TIERS",
    "ME",
    "RESULT_KEYS",
    "SIM_EPOCH",
    "STRATEGIES",
    "ClusterParams",
    "JobOutcome",
    "RunResult",
    "SimClock",
    "SimCluster",
    "SimJob",
    "SimParams",
    "Tier",
    "TraceJob",
    "cluster_background",
    "dump_trace",
    "format_table",
    "load_trace",
    "parse_cluster",
    "parse_cluster_options",
    "parse_park_caps",
    "parse_strategies",
    "parse_tier",
    "parse_trace",
    "realistic_time_limits",
    "run_sweep",
    "simulate",
    "strategy_config",
    "synthetic_trace",
    "to_json",
    "to_records",
    "with_time_limits",
]
