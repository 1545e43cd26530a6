"""Benchmark: `fellows-fsm status` on a journal of 20,000 dispatches (no SLURM: it only reads the journal).

It builds the journal through the real lifecycle and journal API (every dispatch submitted, most of them RUNNING,
a few still live), then runs the installed command as a user would, each variant in a fresh process: wall time
and the child's peak RSS, min / median / max over the repeats.

    .venv/bin/python -m benchmarks.status_scale [--dispatches 20000] [--live 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import spread, write_result
from fellows_fsm.config import FellowsConfig
from fellows_fsm.core import Dispatch
from fellows_fsm.fake import FakeScheduler
from fellows_fsm.journal import Journal
from fellows_fsm.scheduler import JobSpec
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.testing import Driven

FELLOWS_FSM = Path(sys.executable).parent / "fellows-fsm"
VARIANTS = {
    "status (default)": ["status"],
    "status --live": ["status", "--live"],
    "status --json (default)": ["status", "--json"],
    "status --all": ["status", "--all"],
}


def build_journal(path: Path, dispatches: int, live: int) -> None:
    """A journal of ``dispatches`` dispatches, the oldest ``live`` of them still pending on high-eur."""
    clock = SimClock(1_700_000_000.0)
    fake = FakeScheduler(clock)
    ladder = FellowsConfig(park_cap_seconds=600).ladder
    journal = Journal(path)
    try:
        with journal.batch():
            for i in range(dispatches):
                clock.advance_to(clock.now() + 1.0)
                spec = JobSpec(name=f"train-{i}", script="/home/me/train.sbatch", gpus=8, time_limit_seconds=3600)
                d = Driven(Dispatch(f"{i:012x}", spec, ladder), fake, journal, clock)
                journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=clock.now())
                d.submit()
                if i >= live:
                    assert d.job_id is not None
                    fake.start(d.job_id)
                    d.advance(fake.observe([d.job_id])[d.job_id])
    finally:
        journal.close()


def run_once(config: Path, args: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MB) and output lines of one run of the command, in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(
        [str(FELLOWS_FSM), "--config", str(config), *args], capture_output=True, text=True, check=True, timeout=600
    )
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of the children is the largest child so far: it only says something when it grows, so the
    # variants run from the smallest expected to the largest.
    return wall, max(peak, before) / 1024, len(done.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dispatches", type=int, default=20_000)
    parser.add_argument("--live", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fellows-status-") as tmp:
        config = Path(tmp) / "fellows.toml"
        config.write_text(f'state_dir = "{tmp}/state"\n', encoding="utf-8")
        started = time.perf_counter()
        build_journal(Path(tmp) / "state" / "journal.sqlite3", args.dispatches, args.live)
        build_seconds = time.perf_counter() - started
        results: dict[str, Any] = {}
        for name, argv in VARIANTS.items():
            runs = [run_once(config, argv) for _ in range(args.repeats)]
            results[name] = {
                "argv": ["fellows-fsm", *argv],
                "wall_seconds": spread([r[0] for r in runs]),
                "peak_rss_mb_so_far": round(max(r[1] for r in runs), 1),
                "output_lines": runs[0][2],
            }
            print(name, results[name], flush=True)
    write_result(
        "status_scale",
        {
            "dispatches": args.dispatches,
            "live": args.live,
            "repeats": args.repeats,
            "journal_build_seconds": round(build_seconds, 1),
            "variants": results,
        },
    )


if __name__ == "__main__":
    main()
