"""Benchmark b: scheduler load per poll, by live dispatches, beside a naive one-squeue-per-job poller.

The real Router and SlurmScheduler run on the local SLURM (``--real``, default 10,100; run it under the
shared lock) or on a scripted slurmctld (``--fake``, default 1000; benchmarks/fakectld.py answers the
same argv from memory). Counted per poll: squeue, sacct, sacctmgr, sbatch, scancel (and scontrol),
in steady polls (nothing to change), in polls where windows closed (bounded rung changes), and, on the
scripted slurmctld, in a poll where squeue has forgotten some jobs (sacct for those only). ``--calibrated``
(default 10, local SLURM): dispatches under ``park_early = "calibrated"`` waiting on their last rung, 20 polls,
counting the history read (sacct, squeue, scontrol: once per refresh, never per poll).

    flock /tmp/fellows-slurm-tests.lock sh -c 'scripts/dev-slurm up >/dev/null &&
        eval "$(scripts/dev-slurm env)" && .venv/bin/python -m benchmarks.scheduler_load'
    .venv/bin/python -m benchmarks.scheduler_load --real ''     # the scripted slurmctld only
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

from benchmarks.common import spread, write_result
from benchmarks.fakectld import FakeCtld
from benchmarks.realslurm import JOBS_DIR
from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.sim.run import InProcessLane
from fellows_fsm.slurm.observe import squeue_argv
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner

COMMANDS = ("squeue", "sacct", "sacctmgr", "sbatch", "scancel", "scontrol")
STEADY_POLLS = 5


def _delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    return {c: after[c] - before[c] for c in COMMANDS}


def _spec(real: bool) -> JobSpec:
    if not real:
        return JobSpec(name="load", script="load.sbatch", gpus=8, time_limit_seconds=600)
    folder = JOBS_DIR / f"bench-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    script = folder / "sleep.sh"
    script.write_text("#!/bin/bash\nsleep 600\n")
    script.chmod(0o755)
    return JobSpec(
        name="load",
        script=str(script),
        gpus=8,
        time_limit_seconds=600,
        extra_args=(f"--chdir={JOBS_DIR}", "--output=/dev/null"),
    )


def _sbatch_blocker(spec: JobSpec) -> str:
    """A running 64-GPU low-eur job, so that every dispatch pends on Resources."""
    argv = [
        "sbatch",
        "--parsable",
        "--qos=low-eur",
        "--gres=gpu:64",
        "--job-name=blocker",
        *spec.extra_args,
        spec.script,
    ]
    job_id = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().split(";")[0]
    for _ in range(100):
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], check=False, capture_output=True, text=True
        ).stdout
        if state.strip() == "RUNNING":
            return job_id
        time.sleep(0.1)
    raise RuntimeError(f"blocker {job_id} did not start")


def measure(size: int, *, real: bool, cap: float) -> dict[str, Any]:
    """Dispatch ``size`` jobs that stay pending, then count commands per poll in each kind of poll."""
    ctld = None if real else FakeCtld()
    runner: CommandRunner = CommandRunner(timeout_seconds=30) if ctld is None else ctld.runner()
    naive: CommandRunner = CommandRunner(timeout_seconds=30) if real else runner
    port = SlurmScheduler(runner, user="root" if real else "bench")
    clock: Clock = SystemClock() if real else SimClock(time.time())
    spec = _spec(real)
    blocker = _sbatch_blocker(spec) if real else None
    created: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fellows-load-") as state_dir:
        lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=cap, poll_interval_seconds=1.0),
            lanes=(lane,),
            router=RouterConfig(),
            state_dir=state_dir,
        )
        journal = Journal(config.journal_path)
        router = Router(config, port, journal, clock=clock, lanes={"gcp": InProcessLane(lane, clock)}).start()
        try:
            t0 = time.perf_counter()
            for _ in range(size):
                router.dispatch(spec)
            dispatch_seconds = time.perf_counter() - t0
            created = [d.job_id for d in router.live.values() if d.job_id]

            def poll() -> tuple[dict[str, int], float, int]:
                before = Counter(runner.calls)
                t0 = time.perf_counter()
                report = router.poll()
                return _delta(before, runner.calls), time.perf_counter() - t0, report.rung_changes

            steady, steady_seconds, naive_calls, naive_seconds = [], [], [], []
            for _ in range(STEADY_POLLS):
                calls, seconds, _ = poll()
                steady.append(calls)
                steady_seconds.append(seconds)
                # The naive poller, in the same run: one squeue per live job.
                before = naive.calls["squeue"]
                t0 = time.perf_counter()
                for d in router.live.values():
                    if d.job_id is not None:
                        naive.run(squeue_argv([d.job_id]))
                naive_seconds.append(time.perf_counter() - t0)
                naive_calls.append(naive.calls["squeue"] - before)
            # Every window closes: the bounded rung changes, one batched cancel per poll.
            if real:
                time.sleep(max(0.0, max(d.deadline for d in router.live.values()) - time.time()) + 0.1)
            else:
                assert isinstance(clock, SimClock)
                clock.advance_to(clock.now() + cap + 1)
            moving, moving_changes = [], []
            while any(d.rung_index == 0 for d in router.live.values()):
                calls, _, changes = poll()
                moving.append(calls)
                moving_changes.append(changes)
            created += [d.job_id for d in router.live.values() if d.job_id]
            purged: dict[str, object] | None = None
            if ctld is not None:
                gone = [d.job_id for d in list(router.live.values())[:5] if d.job_id]
                ctld.purge(gone)
                calls, _, _ = poll()
                purged = {"purged_jobs": len(gone), "calls": calls, "sacct_ids": ctld.sacct_ids[-1:]}
        finally:
            journal.close()
            if real:
                ids = [i for i in [*created, blocker] if i]
                subprocess.run(["scancel", *ids], check=False)
    return {
        "live_dispatches": size,
        "backend": "real SLURM 22.05" if real else "scripted slurmctld (benchmarks/fakectld.py)",
        "dispatch_seconds": round(dispatch_seconds, 3),
        "steady_polls": steady,
        "steady_poll_wall_seconds": spread(steady_seconds, 4),
        "naive_squeue_per_poll": naive_calls,
        "naive_poll_wall_seconds": spread(naive_seconds, 4),
        "moving_polls": moving,
        "moving_poll_rung_changes": moving_changes,
        "purge_poll": purged,
    }


def measure_calibrated(size: int, polls: int) -> dict[str, Any]:
    """``size`` dispatches with ``park_early = "calibrated"`` pending on their last rung (low-eur, the node full),
    ``polls`` polls back to back: the history read (sacct, squeue, scontrol) comes once, in the first poll only."""
    runner = CommandRunner(timeout_seconds=30)
    port = SlurmScheduler(runner, user="root")
    spec = _spec(True)
    blocker = _sbatch_blocker(spec)
    created: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fellows-load-") as state_dir:
        lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
        config = Config(
            fellows=SlurmSettings(
                qos="low-eur",
                qos_ladder=(),
                park_cap_seconds=3600.0,
                poll_interval_seconds=1.0,
                park_early="calibrated",
            ),
            lanes=(lane,),
            router=RouterConfig(),
            state_dir=state_dir,
        )
        journal = Journal(config.journal_path)
        clock = SystemClock()
        router = Router(config, port, journal, clock=clock, lanes={"gcp": InProcessLane(lane, clock)}).start()
        try:
            for _ in range(size):
                router.dispatch(spec)
            created = [d.job_id for d in router.live.values() if d.job_id]
            per_poll = []
            for _ in range(polls):
                before = Counter(runner.calls)
                router.poll()
                per_poll.append(_delta(before, runner.calls))
        finally:
            journal.close()
            subprocess.run(["scancel", *[i for i in [*created, blocker] if i]], check=False)
    return {
        "live_dispatches": size,
        "backend": "real SLURM 22.05",
        "park_early": "calibrated",
        "polls": per_poll,
        "history_reads": router.cluster_workload.reads,
        "history_refresh_seconds": router.cluster_workload.refresh_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", default="10,100", help="sizes on the local SLURM ('' for none)")
    parser.add_argument("--fake", default="1000", help="sizes on the scripted slurmctld ('' for none)")
    parser.add_argument("--cap", type=float, default=30.0, help="park cap of the real runs (seconds)")
    parser.add_argument(
        "--calibrated", default="10", help="sizes on the local SLURM with park_early calibrated ('' for none)"
    )
    args = parser.parse_args()
    calibrated = [measure_calibrated(int(s), 20) for s in args.calibrated.split(",") if s]
    for run in calibrated:
        print(
            f"{run['live_dispatches']:>5} live, calibrated: history reads {run['history_reads']}; polls {run['polls']}"
        )
    runs = []
    for size in [int(s) for s in args.real.split(",") if s]:
        runs.append(measure(size, real=True, cap=max(args.cap, size * 0.3)))
    for size in [int(s) for s in args.fake.split(",") if s]:
        runs.append(measure(size, real=False, cap=600.0))
    for run in runs:
        steady = run["steady_polls"]
        moving = run["moving_polls"]
        print(f"{run['live_dispatches']:>5} live on {run['backend']}:")
        print(f"   steady poll: {steady[0]}  (naive: {run['naive_squeue_per_poll'][0]} squeue)")
        per_command = {c: spread([p[c] for p in moving], 1) for c in COMMANDS}
        run["moving_poll_calls"] = per_command
        print(f"   {len(moving)} moving polls ({run['moving_poll_rung_changes']} rung changes):")
        for command, value in per_command.items():
            print(f"      {command:9s} per poll min {value['min']} median {value['median']} max {value['max']}")
        print(f"   purge poll: {run['purge_poll']}")
    path = write_result("scheduler_load", {"runs": runs, "calibrated": calibrated})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
