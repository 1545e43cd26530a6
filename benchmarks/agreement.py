"""Agreement with reality: one small trace replayed through the real Router on the local SLURM and in the sim.

Both sides play the same ``[fellows] park_early`` policy (``--park-early``, default "off": the ``ladder``
strategy; "estimate" is the ``predictive`` one) with the same caps and poll interval; background jobs run as the
unix user ``fellows`` on the real cluster. Per job: the QoS it ran on (or GCP) on each side, the start
times, and the free-cluster share of each. Run it under the shared lock:

    flock /tmp/fellows-slurm-tests.lock sh -c 'scripts/dev-slurm up >/dev/null &&
        eval "$(scripts/dev-slurm env)" && .venv/bin/python -m benchmarks.agreement'
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from benchmarks import realslurm
from benchmarks.common import write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.vocab import State
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.sim.results import GCP, JobOutcome, RunResult
from fellows_fsm.sim.run import InProcessLane, minutes_limit, simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import TraceJob, load_trace
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner

TRACE = Path(__file__).resolve().parent / "traces" / "agreement.jsonl"
ESTIMATE_TRACE = Path(__file__).resolve().parent / "traces" / "agreement_estimate.jsonl"
"""A trace where SLURM's start estimate decides: a 64-GPU job with a 5-minute limit that ends after 20 s fills the
cluster; with park_early='estimate' my job leaves high-eur and normal-eur on the estimate and starts on low-eur,
with 'off' it waits on high-eur and starts there."""
STRATEGY = {"off": "ladder", "own-cap": "reason-aware", "estimate": "predictive"}
CAP = 3.0
POLL = 1.0
BACKGROUND_USER = "fellows"
"""The unix user whose jobs are the other users' load (scripts/dev-slurm creates and grants it)."""


def params() -> SimParams:
    """The simulated twin of the local cluster: 64 GPUs, the fellows tiers, dev-eur for debug intent."""
    return SimParams(gpus=64, poll_interval_seconds=POLL, debug_qos="dev-eur")


def replay_real(
    trace: Sequence[TraceJob], *, cap: float = CAP, poll: float = POLL, park_early: str = "off"
) -> RunResult:
    """Play ``trace`` on the local SLURM: my jobs through the real Router (ladder), others' as user fellows."""
    port = SlurmScheduler(CommandRunner(timeout_seconds=30))
    events = sorted(trace, key=lambda j: (j.submit_at, j.index))
    background: list[str] = []
    dispatches: dict[int, Dispatch] = {}
    submitted: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="fellows-agree-") as state_dir:
        lane = CommandSettings(name=GCP, command=("true", "{dispatch_id}"))
        config = Config(
            fellows=SlurmSettings(
                park_cap_seconds=cap, poll_interval_seconds=poll, debug_qos="dev-eur", park_early=park_early
            ),
            lanes=(lane,),
            router=RouterConfig(),
            state_dir=state_dir,
        )
        journal = Journal(config.journal_path)
        handoffs = InProcessLane(lane, _WallClock())
        router = Router(config, port, journal, lanes={GCP: handoffs}).start()
        origin = time.time() + 1.0
        sent = 0

        def release(until: float) -> None:
            nonlocal sent
            while sent < len(events) and origin + events[sent].submit_at <= until:
                job = events[sent]
                time.sleep(max(0.0, origin + job.submit_at - time.time()))
                sent += 1
                if job.mine:
                    spec = realslurm.spec(
                        f"agree-{job.index}", job.gpus, job.duration, time_limit=minutes_limit(job.limit)
                    )
                    submitted[job.index] = time.time()
                    handle = router.dispatch(spec, intent=job.intent)
                    dispatches[job.index] = router.live[handle.dispatch_id]
                else:
                    background.append(
                        realslurm.sbatch(
                            job.qos or "normal-eur",
                            job.gpus,
                            job.duration,
                            user=BACKGROUND_USER,
                            time_limit=job.time_limit,
                        )
                    )

        def sleep(seconds: float) -> None:
            wake = time.time() + seconds
            release(wake)
            time.sleep(max(0.0, wake - time.time()))

        def walking(_: object = None) -> bool:
            """Is a dispatch still walking (a started job is followed to its end since issue 38: not waited for)?"""
            return any(d.state not in STARTED for d in router.live.values())

        try:
            while sent < len(events) or walking():
                if not walking():
                    release(origin + events[sent].submit_at)
                    continue
                router.run(sleep=sleep, until=lambda _: not walking())
            outcomes = []
            for job in (j for j in trace if j.mine):
                d = dispatches[job.index]
                changes = sum(1 for s in d.history if s.trigger == "resubmit")
                if d.state in STARTED and d.look is not None:
                    start = d.look.start_time
                    wait = None if start is None else max(0.0, start - submitted[job.index])
                    outcomes.append(JobOutcome(job.index, job.gpus, job.duration, "fellows", d.rung.qos, wait, changes))
                elif d.id in handoffs.handed:
                    wait = handoffs.handed[d.id] - submitted[job.index]
                    outcomes.append(JobOutcome(job.index, job.gpus, job.duration, GCP, None, wait, changes))
                else:
                    outcomes.append(JobOutcome(job.index, job.gpus, job.duration, "unstarted", None, None, changes))
        finally:
            ids = [job.job_id for row in journal.dispatches() for job in journal.jobs(row.id)]
            journal.close()
            realslurm.cancel(ids + background)
    return RunResult(STRATEGY[park_early], cap, tuple(outcomes))


STARTED = frozenset({State.RUNNING, State.REQUEUED, State.ENDED})
"""Where a job that started on a free rung stands (the simulator's "ran on fellows")."""


@attrs.frozen
class _WallClock:
    def now(self) -> float:
        return time.time()


def replay_sim(trace: Sequence[TraceJob], *, cap: float = CAP, park_early: str = "off") -> RunResult:
    """The same trace in the simulator, with the strategy that plays ``park_early``."""
    return simulate(trace, STRATEGY[park_early], cap, params())


def compare(real: RunResult, sim: RunResult) -> dict[str, object]:
    """Per job: where it ran on each side and its time-to-start; and the free-cluster shares."""
    sim_by = {o.index: o for o in sim.outcomes}
    rows = []
    for o in real.outcomes:
        s = sim_by[o.index]
        rows.append(
            {
                "index": o.index,
                "gpus": o.gpus,
                "real": o.qos or o.lane,
                "sim": s.qos or s.lane,
                "agree": (o.qos or o.lane) == (s.qos or s.lane),
                "real_start_seconds": None if o.start_seconds is None else round(o.start_seconds, 2),
                "sim_start_seconds": None if s.start_seconds is None else round(s.start_seconds, 2),
            }
        )
    gaps = [
        abs(r["real_start_seconds"] - r["sim_start_seconds"])  # type: ignore[operator]
        for r in rows
        if r["real_start_seconds"] is not None and r["sim_start_seconds"] is not None
    ]
    return {
        "jobs": rows,
        "agreeing_jobs": sum(1 for r in rows if r["agree"]),
        "real_free_share": round(real.free_share, 4),
        "sim_free_share": round(sim.free_share, 4),
        "free_share_gap": round(abs(real.free_share - sim.free_share), 4),
        "start_gap_seconds_max": round(max(gaps), 2) if gaps else None,
        "start_gap_seconds_median": round(sorted(gaps)[len(gaps) // 2], 2) if gaps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--park-early", choices=sorted(STRATEGY), default="off")
    parser.add_argument("--cap", type=float, default=CAP)
    parser.add_argument("--name", default="agreement", help="the result file's name under benchmarks/results/")
    args = parser.parse_args()
    trace = load_trace(args.trace)
    realslurm.cancel(realslurm.live_ids())
    realslurm.wait_empty()
    real = replay_real(trace, cap=args.cap, park_early=args.park_early)
    sim = replay_sim(trace, cap=args.cap, park_early=args.park_early)
    result = compare(real, sim)
    for row in result["jobs"]:  # type: ignore[attr-defined]
        print(
            f"job {row['index']:>2} {row['gpus']:>2} GPUs  real {row['real']:<10} sim {row['sim']:<10} "
            f"start real {row['real_start_seconds']} sim {row['sim_start_seconds']}"
        )
    print(
        f"agree {result['agreeing_jobs']}/{len(result['jobs'])}; free share real {result['real_free_share']} "  # type: ignore[arg-type]
        f"sim {result['sim_free_share']}; start gap median {result['start_gap_seconds_median']} s, "
        f"max {result['start_gap_seconds_max']} s"
    )
    path = write_result(
        args.name,
        {
            "trace": str(args.trace.relative_to(Path.cwd()) if args.trace.is_absolute() else args.trace),
            "park_early": args.park_early,
            "park_cap_seconds": args.cap,
            "poll_interval_seconds": POLL,
            **result,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
