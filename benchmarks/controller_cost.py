"""Benchmark c: the controller's own cost at scale, on the shipped fake port (no SLURM at all).

For 1k and 10k live dispatches: CPU per poll tick (time.process_time; the fake port's observe, which
stands for squeue, is timed apart and excluded), resident memory, machine creation time, journal writes
per second. Each size runs in fresh processes so that memory figures do not mix.

    .venv/bin/python -m benchmarks.controller_cost [--sizes 1000,10000] [--repeats 3] [--ticks 10]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import rss_mb, spread, write_result
from fellows_fsm.config import Config, FellowsConfig, LaneConfig, RouterConfig
from fellows_fsm.core import Dispatch, Record, Step, build_machine
from fellows_fsm.fake import FakeScheduler
from fellows_fsm.journal import Journal
from fellows_fsm.router import Router
from fellows_fsm.scheduler import JobSpec, Observation
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.sim.run import InProcessLane

CAP = 3600.0
SPEC = JobSpec(name="bench", script="bench.sbatch", gpus=8, time_limit_seconds=3600)


class TimedFake(FakeScheduler):
    """The fake port, with the CPU spent in observe (the stand-in for squeue) summed apart."""

    observe_cpu = 0.0

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        t0 = time.process_time()
        try:
            return super().observe(job_ids)
        finally:
            self.observe_cpu += time.process_time() - t0


def worker(size: int, ticks: int) -> dict[str, object]:
    """One process: build ``size`` live dispatches, then measure ticks, memory and the journal."""
    clock = SimClock()
    gc.collect()
    base = rss_mb()
    with tempfile.TemporaryDirectory(prefix="fellows-bench-") as state_dir:
        lane = LaneConfig(name="gcp", command=("true", "{dispatch_id}"))
        config = Config(
            fellows=FellowsConfig(park_cap_seconds=CAP, poll_interval_seconds=10.0),
            lanes=(lane,),
            router=RouterConfig(),
            state_dir=state_dir,
        )
        fake = TimedFake(clock)  # schedule() is never called: every job stays pending
        journal = Journal(config.journal_path)
        router = Router(config, fake, journal, clock=clock, lanes={"gcp": InProcessLane(lane, clock)})

        # Machine creation: the shared machine once, then bare Dispatch objects (no journal, no submit).
        t0 = time.perf_counter()
        build_machine.cache_clear()
        build_machine(config.fellows.ladder)
        machine_build_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        bare = [Dispatch(f"b{i}", SPEC, config.fellows.ladder) for i in range(size)]
        dispatch_create_us = (time.perf_counter() - t0) / size * 1e6
        del bare

        # Dispatching: a journal row, a submit step, the fake sbatch, the attached job: 3 commits each.
        t0 = time.perf_counter()
        for _ in range(size):
            router.dispatch(SPEC)
        dispatch_seconds = time.perf_counter() - t0
        gc.collect()
        after = rss_mb()

        # Steady ticks: every dispatch live and pending, no deadline reached.
        steady, steady_ex = [], []
        for _ in range(ticks):
            clock.advance_to(clock.now() + 10.0)
            fake.observe_cpu = 0.0
            t0 = time.process_time()
            report = router.poll()
            total = time.process_time() - t0
            assert report.live == size, report
            assert report.rung_changes == 0, report
            steady.append(total * 1000)
            steady_ex.append((total - fake.observe_cpu) * 1000)

        # Moving ticks: every window closed; the per-tick bound lets 20 dispatches change rung per tick.
        clock.advance_to(clock.now() + CAP)
        moving, moving_ex, changes = [], [], []
        for _ in range(ticks):
            fake.observe_cpu = 0.0
            t0 = time.process_time()
            report = router.poll()
            total = time.process_time() - t0
            moving.append(total * 1000)
            moving_ex.append((total - fake.observe_cpu) * 1000)
            changes.append(report.rung_changes)
            clock.advance_to(clock.now() + 1.0)

        # Journal writes alone: committed transitions per second on this disk.
        d = router.live[next(iter(router.live))]
        count = 2000
        t0 = time.perf_counter()
        for i in range(count):
            step = Step(clock.now(), d.state, d.state, "bench", d.rung_index, d.rung.qos, d.job_id, note=str(i))
            journal.record(Record(d.id, step, d.label, final=False))
        journal_commits_per_second = count / (time.perf_counter() - t0)
        journal.close()
    return {
        "size": size,
        "rss_before_mb": base["rss_mb"],
        "rss_after_mb": after["rss_mb"],
        "peak_rss_mb": after["peak_rss_mb"],
        "bytes_per_dispatch": round((after["rss_mb"] - base["rss_mb"]) * 1024 * 1024 / size),
        "machine_build_ms": round(machine_build_ms, 3),
        "dispatch_create_us": round(dispatch_create_us, 2),
        "dispatches_per_second": round(size / dispatch_seconds),
        "dispatch_journal_commits_per_second": round(3 * size / dispatch_seconds),
        "journal_commits_per_second": round(journal_commits_per_second),
        "steady_tick_cpu_ms": steady,
        "steady_tick_cpu_ms_excluding_observe": steady_ex,
        "moving_tick_cpu_ms": moving,
        "moving_tick_cpu_ms_excluding_observe": moving_ex,
        "moving_tick_rung_changes": changes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per size")
    parser.add_argument("--ticks", type=int, default=10, help="ticks measured per process")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        json.dump(worker(args.worker, args.ticks), sys.stdout)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: dict[str, dict[str, dict[str, float | int]]] = {}
    for size in sizes:
        runs: list[dict[str, Any]] = []
        for _ in range(args.repeats):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.controller_cost",
                    "--worker",
                    str(size),
                    "--ticks",
                    str(args.ticks),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=Path(__file__).resolve().parents[1],
            )
            runs.append(json.loads(out.stdout))

        def pooled(key: str, runs: list[dict[str, Any]] = runs) -> list[float]:
            values: list[float] = []
            for run in runs:
                value = run[key]
                values.extend(value if isinstance(value, list) else [value])
            return values

        steady_ticks = [run["steady_tick_cpu_ms_excluding_observe"] for run in runs]
        figures[str(size)] = {
            # The first steady tick gives every dispatch its first observation (every guard runs); later ones
            # see nothing new. Split, so a max can be told apart from the ticks a long-running router makes.
            "first_steady_tick_cpu_ms_excluding_observe": spread([ticks[0] for ticks in steady_ticks]),
            "later_steady_tick_cpu_ms_excluding_observe": spread([t for ticks in steady_ticks for t in ticks[1:]]),
        }
        figures[str(size)] |= {
            key: spread(pooled(key))
            for key in (
                "steady_tick_cpu_ms",
                "steady_tick_cpu_ms_excluding_observe",
                "moving_tick_cpu_ms",
                "moving_tick_cpu_ms_excluding_observe",
                "moving_tick_rung_changes",
                "rss_before_mb",
                "rss_after_mb",
                "peak_rss_mb",
                "bytes_per_dispatch",
                "machine_build_ms",
                "dispatch_create_us",
                "dispatches_per_second",
                "dispatch_journal_commits_per_second",
                "journal_commits_per_second",
            )
        }
        print(f"{size} live dispatches:")
        for key, value in figures[str(size)].items():
            print(f"  {key:42s} min {value['min']:>10} median {value['median']:>10} max {value['max']:>10}")
    path = write_result(
        "controller_cost",
        {
            "repeats": args.repeats,
            "ticks_per_repeat": args.ticks,
            "park_cap_seconds": CAP,
            "router": "Router",
            "sizes": figures,
        },
        module="controller_cost",
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
