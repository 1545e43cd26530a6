"""Benchmark: SLURM calls per poll interval of wall time, for dispatches with staggered deadlines.

The real Router, its own ``run()`` loop and the real SlurmScheduler drive a scripted slurmctld
(benchmarks/fakectld.py: every job stays pending, so every dispatch walks the whole ladder and then goes to
an in-process GCP lane) on a simulated clock: dispatches arrive one every ``--gap`` seconds, so their
deadlines are spread, and the controller is unreachable for a stretch in the middle of the run. Every
squeue and every cancel call is stamped with the simulated time; the result counts them in every window of
one poll interval (the promise: at most one of each), and how late each park came after its deadline.

    .venv/bin/python -m benchmarks.poll_rate                 # 30, 1000 and 10,000 dispatches
    .venv/bin/python -m benchmarks.poll_rate --sizes 30
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common import percentiles, write_result
from benchmarks.fakectld import FakeCtld
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.sim.run import InProcessLane
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.transport import Reply, Request

SPEC = JobSpec(name="load", script="load.sbatch", gpus=8, time_limit_seconds=600)


class StampedCtld(FakeCtld):
    """The scripted slurmctld, stamping each command attempt with the simulated time; it can stop answering."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__()
        self.clock = clock
        self.stamps: dict[str, list[float]] = {"squeue": [], "scancel": [], "sbatch": [], "sacct": []}

    def __call__(self, request: Request) -> Reply:
        name = request.argv[0]
        if name in self.stamps and "--version" not in request.argv:
            self.stamps[name].append(self.clock.now())
        return super().__call__(request)


def max_per_window(stamps: Sequence[float], window: float) -> int:
    """The most calls that fall within any half-open window of ``window`` seconds."""
    best, start = 0, 0
    for end, at in enumerate(stamps):
        while at - stamps[start] >= window - 1e-9:
            start += 1
        best = max(best, end - start + 1)
    return best


def measure(size: int, *, cap: float, poll: float, gap: float, outage: float) -> dict[str, Any]:
    """Run ``size`` dispatches, one every ``gap`` s, through the whole ladder on the simulated clock."""
    clock = SimClock(time.time())
    ctld = StampedCtld(clock)
    port = SlurmScheduler(ctld.runner(), user="bench")
    with tempfile.TemporaryDirectory(prefix="fellows-rate-") as state_dir:
        lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=cap, poll_interval_seconds=poll),
            lanes=(lane,),
            router=RouterConfig(max_rung_changes_per_tick=max(20, size)),
            state_dir=state_dir,
        )
        journal = Journal(config.journal_path)
        router = Router(config, port, journal, clock=clock, lanes={"gcp": InProcessLane(lane, clock)}).start()
        origin = clock.now()
        arrivals = [origin + i * gap for i in range(size)]
        outage_at = origin + size * gap + 1.5 * cap  # after the last arrival, while the last ones still walk
        pending = list(arrivals)
        wall = time.perf_counter()

        def sleep(seconds: float) -> None:
            target = clock.now() + seconds
            while pending and pending[0] <= target:
                clock.advance_to(max(clock.now(), pending.pop(0)))
                router.dispatch(SPEC)
            ctld.down = outage > 0 and outage_at <= target < outage_at + outage
            clock.advance_to(target)

        sleep(0)
        while pending or router.busy:
            router.run(until=lambda _: not pending and not router.busy, sleep=sleep)
            if not router.busy and pending:
                sleep(pending[0] - clock.now())
        wall = time.perf_counter() - wall
        late: list[float] = []
        paused = 0
        for row in journal.dispatches():
            steps = journal.steps(row.id)
            entered = [s.at for s in steps if s.trigger in ("submit", "resubmit")]
            parks = [s.at for s in steps if s.trigger == "park"]
            pauses = [s.at for s in steps if s.trigger == "pause"]
            paused += bool(pauses)
            # The first rung's park, unless an outage moved its window first (then it measures the outage).
            if entered and parks and (not pauses or parks[0] < pauses[0]):
                late.append(max(0.0, parks[0] - (entered[0] + cap)))
        journal.close()
    span = (max(ctld.stamps["squeue"]) - min(ctld.stamps["squeue"])) if ctld.stamps["squeue"] else 0.0
    return {
        "dispatches": size,
        "park_cap_seconds": cap,
        "poll_interval_seconds": poll,
        "arrival_gap_seconds": gap,
        "outage_seconds": outage,
        "simulated_seconds": round(span, 1),
        "squeue_calls": len(ctld.stamps["squeue"]),
        "squeue_due": int(span // poll) + 1,
        "max_squeue_per_interval": max_per_window(ctld.stamps["squeue"], poll),
        "max_scancel_per_interval": max_per_window(ctld.stamps["scancel"], poll),
        "sacct_calls": len(ctld.stamps["sacct"]),
        "sbatch_calls": len(ctld.stamps["sbatch"]),
        "first_park_late_seconds": percentiles(late, 2) if late else None,
        "dispatches_paused_by_the_outage": paused,
        "wall_seconds": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30,1000,10000", help="numbers of dispatches")
    args = parser.parse_args()
    runs = []
    for size in [int(s) for s in args.sizes.split(",") if s]:
        if size <= 30:  # the repro: 4 s caps, a 10 s poll, one submit every 0.3 s
            run = measure(size, cap=4.0, poll=10.0, gap=0.3, outage=30.0)
        else:  # 600 s caps, a 10 s poll, arrivals spread over one cap
            run = measure(size, cap=600.0, poll=10.0, gap=600.0 / size, outage=120.0)
        runs.append(run)
        print(
            f"{size:>6} dispatches: {run['squeue_calls']} squeue over {run['simulated_seconds']} s "
            f"({run['squeue_due']} intervals); max per interval: squeue {run['max_squeue_per_interval']}, "
            f"scancel {run['max_scancel_per_interval']}; first park late by {run['first_park_late_seconds']} s "
            f"(wall {run['wall_seconds']} s)"
        )
    path = write_result("poll_rate", {"runs": runs})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
