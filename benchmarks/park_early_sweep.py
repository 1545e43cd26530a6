"""The park_early sweep: off / own-cap / estimate at caps 60, 300, 600 s, against the oracle, in the simulator.

    .venv/bin/python -m benchmarks.park_early_sweep [--seeds 1,2,3] [--park-caps 60,300,600]

Three workloads from the built-in synthetic one (seed 1, 48 h, 64 GPUs): time limits equal to the real durations
(SLURM's start estimates exact but for new arrivals), 2x and 10x the durations (estimates too pessimistic). Every
policy is the real Router with ``[fellows] park_early`` set (the simulator's ``ladder``, ``reason-aware`` and
``predictive`` strategies) with the default ``park_early_last_rung = false``; "estimate, last rung too" sets it
true. The oracle takes
whichever tier starts a job first within the ladder's worst case, else GCP at once; oracle-prefer keeps the
user's preference (the first rung that starts it within one cap). Other seeds are played at the default cap as a
check that seed 1 is not special.

Candidate last-rung margins (MARGINS, not in the product): ``estimate`` with the last rung left early only when
SLURM's estimate lies past the window's end by more than a margin, a fixed one or a fraction of the job's own time
limit (limits scale with the estimates' error on these workloads). The simulator plays them by wrapping the
lifecycle's ``early_park_reason`` for the run (``_last_rung_margin``); every other row is the product as shipped.
Writes benchmarks/results/park_early_sweep.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from benchmarks.common import write_result
from fellows_fsm.core import lifecycle
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.sim.results import RunResult
from fellows_fsm.sim.run import simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import TraceJob, synthetic_trace, with_time_limits

POLICIES: tuple[tuple[str, str, bool], ...] = (
    ("off", "ladder", True),
    ("own-cap", "reason-aware", True),
    ("estimate", "predictive", False),
    ("estimate, last rung too", "predictive", True),
    ("calibrated", "calibrated-last", False),
    ("oracle", "oracle", True),
    ("oracle-prefer", "oracle-prefer", True),
)
"""(row name, simulator strategy, park_early_last_rung)."""
MARGINS: tuple[tuple[str, float, float], ...] = (
    ("estimate, last rung past +1 h", 3600.0, 0.0),
    ("estimate, last rung past +2 h", 7200.0, 0.0),
    ("estimate, last rung past +0.25 x limit", 0.0, 0.25),
    ("estimate, last rung past +0.5 x limit", 0.0, 0.5),
    ("estimate, last rung past +1 x limit", 0.0, 1.0),
)
"""Candidate last-rung margins, played at the default cap only: (row name, seconds, fraction of the job's own time
limit); the last rung is left on the estimate only past the window's end plus seconds plus fraction x limit."""
LIMITS = (1.0, 2.0, 10.0)
DEFAULT_CAP = 600.0


def _record(name: str, result: RunResult, oracle: RunResult | None) -> dict[str, Any]:
    ratio = None if oracle is None or oracle.free_share == 0 else result.free_share / oracle.free_share
    p50, p95 = result.p50_start_seconds, result.p95_start_seconds
    return {
        "policy": name,
        "park_cap_seconds": result.park_cap_seconds,
        "free_share": round(result.free_share, 4),
        "free_share_vs_oracle": None if ratio is None else round(ratio, 3),
        "p50_start_seconds": None if p50 is None else round(p50, 1),
        "p95_start_seconds": None if p95 is None else round(p95, 1),
        "gcp_gpu_hours": round(result.gcp_gpu_hours, 1),
        "rung_changes": result.rung_changes,
        "unstarted": result.unstarted,
    }


@contextmanager
def _last_rung_margin(seconds: float, of_limit: float) -> Iterator[None]:
    """For the run inside, a dispatch leaves its LAST rung on SLURM's estimate only when the estimate lies past the
    window's end by more than ``seconds + of_limit x`` the job's own time limit (a candidate, not the product).

    Every other early park (a free rung, a last rung left for want of an estimate) is the product's policy
    unchanged: the wrapper only turns some of its last-rung estimate parks into waits.
    """
    original: Callable[[Dispatch], str | None] = lifecycle.early_park_reason

    def candidate(self: Dispatch) -> str | None:
        reason = original(self)
        obs = self.look
        last = self.rung_index == len(self.ladder.rungs) - 1
        if reason is None or not last or obs is None or obs.expected_start is None:
            return reason
        margin = seconds + of_limit * (self.spec.time_limit_seconds or 0)
        return reason if obs.expected_start > self.deadline + margin else None

    lifecycle.early_park_reason = candidate  # the guard cannot_start_in_window and the park's note read it
    try:
        yield
    finally:
        lifecycle.early_park_reason = original


def play(
    trace: Sequence[TraceJob], caps: Sequence[float], gpus: int, poll: float, *, margins: bool = False
) -> list[dict[str, Any]]:
    """Every policy at every cap on ``trace``, the oracle first (the ratios need it); with ``margins`` the candidate
    last-rung margins too, at the default cap."""
    rows = []
    for cap in caps:
        results = {}
        for name, strategy, last_rung in POLICIES:
            params = SimParams(gpus=gpus, poll_interval_seconds=poll, park_early_last_rung=last_rung)
            results[name] = simulate(trace, strategy, cap, params)
        rows += [_record(name, result, results["oracle"]) for name, result in results.items()]
        if margins and cap == DEFAULT_CAP:
            params = SimParams(gpus=gpus, poll_interval_seconds=poll, park_early_last_rung=True)
            for name, seconds, of_limit in MARGINS:
                with _last_rung_margin(seconds, of_limit):
                    result = simulate(trace, "predictive", cap, params)
                rows.append({**_record(name, result, results["oracle"]), "candidate": True})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3", help="the first is the main sweep; the others are checks at 600 s")
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--park-caps", default="60,300,600")
    parser.add_argument("--poll", type=float, default=10.0)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    caps = [float(c) for c in args.park_caps.split(",")]
    t0 = time.perf_counter()
    workloads: list[dict[str, Any]] = []
    for seed in seeds:
        base = synthetic_trace(seed=seed, hours=args.hours, gpus=args.gpus)
        mine = [j for j in base if j.mine]
        for factor in LIMITS:
            trace = base if factor == 1.0 else with_time_limits(base, factor)
            rows = play(trace, caps if seed == seeds[0] else [DEFAULT_CAP], args.gpus, args.poll, margins=True)
            workloads.append(
                {
                    "seed": seed,
                    "time_limit_factor": factor,
                    "jobs": len(trace),
                    "my_jobs": len(mine),
                    "my_gpu_hours": round(sum(j.gpu_hours for j in mine), 1),
                    "rows": rows,
                }
            )
            for row in rows:
                print(seed, f"x{factor:g}", *row.values(), flush=True)
    seconds = time.perf_counter() - t0
    path = write_result(
        "park_early_sweep",
        {
            "seeds": seeds,
            "hours": args.hours,
            "gpus": args.gpus,
            "poll_interval_seconds": args.poll,
            "park_caps": caps,
            "sweep_seconds": round(seconds, 1),
            "workloads": workloads,
        },
        module="park_early_sweep",
    )
    print(f"wrote {path} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
