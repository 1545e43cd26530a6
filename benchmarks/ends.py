"""Issue 38: every job followed to its end.

``--fake``: 1,000 running dispatches on the fake port (frozen time), 30 polls, about 3% of the jobs ending before
each: the squeue (observe) and sacct calls of each poll interval, and each end recorded once.

Without it, on the real local SLURM (run it in a cluster of its own: scripts/in-netns NAME, after
``scripts/dev-slurm up``): 20 one-GPU jobs sleeping 3 to 12 s, driven by a Router polling and following every
1 s; for each, the time from SLURM's end (sacct's End, whole seconds) to its end step in the journal.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from freezegun import freeze_time

from benchmarks.common import percentiles, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.vocab import FOLLOWED_STATES
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec

RUNNING = 1000
POLLS = 30
POLL = 10.0


def _fake(follow: float) -> dict[str, Any]:
    """1,000 running dispatches on the fake port; calls per poll interval while ~3% end before each poll."""
    rng = random.Random(38)
    with tempfile.TemporaryDirectory() as tmp, freeze_time("2026-12-07 00:00:00") as clock:
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=600, poll_interval_seconds=POLL),
            router=RouterConfig(follow_interval_seconds=follow),
            state_dir=Path(tmp),
        )
        fake = FakeScheduler(total_gpus=RUNNING * 2)
        journal = Journal(config.journal_path)
        router = Router(config, fake, journal).start()
        ids = [router.dispatch(JobSpec(f"j{i}", "job.sbatch", gpus=1)).dispatch_id for i in range(RUNNING)]
        for _ in range(3):
            fake.schedule()
            clock.tick(POLL)
            router.poll()
        assert all(router.live[i].state in FOLLOWED_STATES for i in ids)
        polls, ended = [], 0
        for _ in range(POLLS):
            running = [d for d in router.live.values() if d.state in FOLLOWED_STATES]
            for d in rng.sample(running, min(len(running), RUNNING // 30)):
                fake.end(d.job_id or "", rng.choice(["COMPLETED", "FAILED", "TIMEOUT"]), exit_code=rng.choice([0, 3]))
                ended += 1
            fake.calls.clear()
            clock.tick(POLL)
            router.poll()
            polls.append({"squeue": fake.calls["observe"], "sacct": fake.calls["sacct"]})
        recorded = journal.ends()
        steps = sum(1 for i in recorded for s in journal.steps(i) if s.trigger == "end")
        journal.close()
    return {
        "running_dispatches": RUNNING,
        "poll_interval_seconds": POLL,
        "follow_interval_seconds": follow,
        "polls": polls,
        "max_squeue_per_poll": max(p["squeue"] for p in polls),
        "max_sacct_per_poll": max(p["sacct"] for p in polls),
        "jobs_ended": ended,
        "ends_recorded": len(recorded),
        "end_steps": steps,
    }


def _real(jobs: int) -> dict[str, Any]:
    """``jobs`` short jobs on the real SLURM, driven to their ends; SLURM's end to the journaled end step."""
    from fellows_fsm.slurm.port import SlurmScheduler  # noqa: PLC0415 - only the real run needs SLURM's port
    from fellows_fsm.slurm.runner import CommandRunner  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=600, poll_interval_seconds=1.0),
            router=RouterConfig(follow_interval_seconds=1.0),
            state_dir=Path(tmp),
        )
        journal = Journal(config.journal_path)
        router = Router(config, SlurmScheduler(CommandRunner(timeout_seconds=20)), journal).start()
        work = Path(tmp) / "jobs"
        work.mkdir(mode=0o777)
        work.chmod(0o777)
        ids = []
        for i in range(jobs):
            script = work / f"job{i}.sh"
            script.write_text(f"#!/bin/bash\nsleep {3 + (i * 7) % 10}\n", encoding="utf-8")
            script.chmod(0o755)
            spec = JobSpec(
                f"end-{uuid.uuid4().hex[:6]}", str(script), gpus=1, time_limit_seconds=300,
                extra_args=(f"--chdir={work}", "--output=/dev/null"),
            )  # fmt: skip
            ids.append(router.dispatch(spec).dispatch_id)
        end = time.monotonic() + 300
        router.run(until=lambda _: not router.busy or time.monotonic() > end)
        ends = journal.ends(ids)
        lags = []
        for i in ids:
            step = next(s for s in journal.steps(i) if s.trigger == "end")
            lags.append(step.at - ends[i].ended_at)
        results = sorted({e.result for e in ends.values()})
        journal.close()
    return {
        "jobs": jobs,
        "poll_interval_seconds": 1.0,
        "follow_interval_seconds": 1.0,
        "ended": len(ends),
        "results": results,
        "slurm_end_to_journal_seconds": percentiles(lags),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fake", action="store_true", help="the fake port's call counts (no SLURM needed)")
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    if args.fake:
        data = {"runs": [_fake(POLL), _fake(3 * POLL)]}
        print(write_result("ends_fake", data, module="ends"))
    else:
        print(write_result("ends_real", _real(args.jobs), module="ends"))


if __name__ == "__main__":
    main()
