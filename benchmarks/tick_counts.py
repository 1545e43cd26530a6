"""Benchmark c's tick counted instead of timed: WAL pages written and Python bytecodes run per tick, old code and new.

The machine is shared and its timings spread 10-30 % from run to run; these counts do not. The same scenario as
benchmarks/controller_cost.py's worker (``size`` live dispatches on the shipped fake port, steady ticks, then every
window closes at once and the moving ticks walk ``rung_changes_per_tick`` dispatches each), one process per version:

- WAL frames (4 KB page writes, each later copied by a checkpoint): the journal's automatic checkpoint off, a
  TRUNCATE checkpoint before each ``Router.poll``, the frames the WAL holds after it;
- bytecodes: ``sys.settrace`` opcode events during one poll (the fake port's own code not counted), for the first
  and second steady and moving ticks (tracing is slow: the others are not traced);
- journal transactions: COMMITs the journal's connection ran during the poll (its ``set_trace_callback``).

The old code is ``--baseline``'s ``src/`` (git archive), first on PYTHONPATH; this file runs on both (it imports only
what both have).

    .venv/bin/python -m benchmarks.tick_counts [--size 10000] [--baseline fa5401a]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CAP = 3600.0
POLL_SECONDS = 10.0
TRACED = (0, 1)
"""The ticks of each kind whose bytecodes are counted."""


def worker(size: int, ticks: int) -> dict[str, Any]:
    import sqlite3  # noqa: PLC0415 - the worker runs in a child on either tree

    from fellows_fsm.config.file import Config, RouterConfig  # noqa: PLC0415
    from fellows_fsm.driver.router import Router  # noqa: PLC0415
    from fellows_fsm.journal.store import Journal  # noqa: PLC0415
    from fellows_fsm.scheduler.fake import FakeScheduler  # noqa: PLC0415
    from fellows_fsm.scheduler.port import JobSpec  # noqa: PLC0415
    from fellows_fsm.sim.clock import SimClock  # noqa: PLC0415
    from fellows_fsm.sim.run import InProcessLane  # noqa: PLC0415

    try:
        from fellows_fsm.lanes.command.config import CommandSettings as Lane  # noqa: PLC0415
        from fellows_fsm.lanes.slurm.config import SlurmSettings as Slurm  # noqa: PLC0415
    except ImportError:  # the names before issue 40
        from fellows_fsm.lanes.command.config import LaneConfig as Lane  # type: ignore[no-redef]  # noqa: PLC0415
        from fellows_fsm.lanes.slurm.config import FellowsConfig as Slurm  # type: ignore[no-redef]  # noqa: PLC0415

    spec = JobSpec(name="bench", script="bench.sbatch", gpus=8, time_limit_seconds=3600)
    fake_file = sys.modules[FakeScheduler.__module__].__file__
    clock = SimClock()
    out: dict[str, Any] = {"size": size}
    with tempfile.TemporaryDirectory(prefix="fellows-counts-") as state_dir:
        lane = Lane(name="gcp", command=("true", "{dispatch_id}"))
        config = Config(
            fellows=Slurm(park_cap_seconds=CAP, poll_interval_seconds=POLL_SECONDS),
            lanes=(lane,),
            router=RouterConfig(),
            state_dir=state_dir,
        )
        fake = FakeScheduler(clock)
        journal = Journal(config.journal_path)
        router = Router(config, fake, journal, clock=clock, lanes={"gcp": InProcessLane(lane, clock)}).start()
        for _ in range(size):
            router.dispatch(spec)
        db: sqlite3.Connection = journal._db
        db.execute("PRAGMA wal_autocheckpoint=0")
        commits = [0]

        def statement(sql: str) -> None:
            if sql.strip().upper().startswith("COMMIT"):
                commits[0] += 1

        def counted_poll(traced: bool) -> dict[str, Any]:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            commits[0] = 0
            db.set_trace_callback(statement)
            opcodes = [0]

            def trace(frame: Any, event: str, arg: Any) -> Any:
                if frame.f_code.co_filename == fake_file:
                    return None
                frame.f_trace_opcodes = True
                if event == "opcode":
                    opcodes[0] += 1
                return trace

            if traced:
                sys.settrace(trace)
            try:
                report = router.poll()
            finally:
                sys.settrace(None)
                db.set_trace_callback(None)
            frames = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
            return {
                "wal_frames": frames,
                "commits": commits[0],
                "bytecodes": opcodes[0] if traced else None,
                "rung_changes": report.rung_changes,
            }

        steady, moving = [], []
        for i in range(ticks):
            clock.advance_to(clock.now() + POLL_SECONDS)
            steady.append(counted_poll(i in TRACED))
        clock.advance_to(clock.now() + CAP)
        for i in range(ticks):
            moving.append(counted_poll(i in TRACED))
            clock.advance_to(clock.now() + 1.0)
        out["events"] = (
            db.execute("SELECT count(*) FROM outbox").fetchone()[0]
            if db.execute("SELECT 1 FROM sqlite_master WHERE name='outbox'").fetchone()
            else 0
        )
        journal.close()
    out["steady"], out["moving"] = steady, moving
    return out


def run(root: Path | None, size: int, ticks: int) -> dict[str, Any]:
    """One child process: this checkout's fellows_fsm (``root`` None) or ``root``'s."""
    env = dict(os.environ)
    if root is not None:
        env["PYTHONPATH"] = str(root / "src")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(size), "--ticks", str(ticks)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=root or REPO)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def old_tree(commit: str, into: Path) -> Path:
    """``commit``'s ``src/``, extracted with git archive."""
    archive = into / "old.tar"
    with archive.open("wb") as tar:
        subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"], stdout=tar, check=True, timeout=120)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(into)], check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--ticks", type=int, default=4)
    parser.add_argument("--baseline", default="fa5401a")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        json.dump(worker(args.worker, args.ticks), sys.stdout)
        return
    with tempfile.TemporaryDirectory(prefix="fellows-counts-") as tmp:
        results = {
            "old": run(old_tree(args.baseline, Path(tmp)), args.size, args.ticks),
            "new": run(None, args.size, args.ticks),
        }
    for name, result in results.items():
        print(
            f"{name} ({args.baseline if name == 'old' else 'this checkout'}), {result['size']} live, "
            f"{result['events']} outbox events at the end:"
        )
        for kind in ("steady", "moving"):
            for i, tick in enumerate(result[kind]):
                codes = f"{tick['bytecodes'] / 1e6:.2f} M bytecodes" if tick["bytecodes"] is not None else ""
                print(
                    f"  {kind} tick {i}: {tick['wal_frames']:>5} WAL frames, {tick['commits']:>4} commits, "
                    f"{tick['rung_changes']:>4} rung changes  {codes}"
                )
    from benchmarks.common import write_result  # noqa: PLC0415 - the parent only (a child runs on either tree)

    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
    )
    path = write_result(
        "tick_counts", {"baseline": args.baseline, "new": head.stdout.strip(), "results": results}, module="tick_counts"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
