"""Benchmark c: the controller's own cost at scale, on the shipped fake port (no SLURM at all), old code and new.

For 1,000, 10,000 and 100,000 live dispatches: CPU per poll tick (time.process_time; the fake port's observe,
which stands for squeue, is timed apart and excluded), resident memory, machine creation time, journal writes
per second. Each run is a fresh process (so memory figures do not mix), with one of two versions of the code on
the same interpreter and packages, old and new alternating run by run:

- old: the ``src/`` and ``benchmarks/`` of ``--baseline`` (default: main before issue 18's lifecycle rewrite), taken
  with ``git archive`` into a temporary directory; its own worker (this file as it was then: the APIs may differ)
  runs there, with that tree as its working directory and first on PYTHONPATH;
- new: this checkout's worker and ``src/``, the same way.

An old run that takes longer than ``--old-timeout`` seconds is stopped, and the old code is not measured at
that size or above (the result says so).

    .venv/bin/python -m benchmarks.controller_cost [--sizes 1000,10000,100000] [--repeats 3] [--ticks 10]
        [--rounds 1] [--name controller_cost]

``--rounds N`` runs the whole comparison N times and keeps each round's figures (the machine's load moves a median
by more than 10 % from one run to the next: a bar at 1.10x is judged on every round, not one).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import rss_mb, spread, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.effects import Record, Step
from fellows_fsm.core.machine import build_machine
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec, Observation
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.sim.run import InProcessLane

REPO = Path(__file__).resolve().parents[1]
BASELINE = "5363a4c3f3623eccafe25ebb5a2624cdd248ac5e"
"""main before issue 18's lifecycle rewrite: the transitions table in core/machine.py with hand-written step methods
and fast path in core/dispatch.py (``advance(..., may_leave=)``, ``Dispatch.observation``). The worker calls neither:
it drives the Router and builds bare Dispatch objects, so the same worker runs on both."""
CAP = 3600.0
POLL_SECONDS = 10.0
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
        lane = CommandSettings(name="gcp", command=("true", "{dispatch_id}"))
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=POLL_SECONDS),
            lanes=(lane,),
            router=RouterConfig(),
            state_dir=state_dir,
        )
        fake = TimedFake(clock)  # schedule() is never called: every job stays pending
        journal = Journal(config.journal_path)
        router = Router(config, fake, journal, clock=clock, lanes={"gcp": InProcessLane(lane, clock)}).start()

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
            clock.advance_to(clock.now() + POLL_SECONDS)
            fake.observe_cpu = 0.0
            t0 = time.process_time()
            report = router.poll()
            total = time.process_time() - t0
            assert report.live == size, report
            assert report.rung_changes == 0, report
            steady.append(total * 1000)
            steady_ex.append((total - fake.observe_cpu) * 1000)

        # Moving ticks: every window closes at once; the per-tick bound (rung_changes_per_tick) limits the rung
        # changes of each tick, and (this code) the parks too: the others wait on their rung for a later tick.
        clock.advance_to(clock.now() + CAP)
        moving, moving_ex, changes, deferred = [], [], [], []
        for _ in range(ticks):
            fake.observe_cpu = 0.0
            t0 = time.process_time()
            report = router.poll()
            total = time.process_time() - t0
            moving.append(total * 1000)
            moving_ex.append((total - fake.observe_cpu) * 1000)
            changes.append(report.rung_changes)
            deferred.append(report.deferred)
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
        "moving_tick_deferred": deferred,
        "rung_changes_per_tick": config.rung_changes_per_tick,
    }


FIGURES = (
    "steady_tick_cpu_ms",
    "steady_tick_cpu_ms_excluding_observe",
    "moving_tick_cpu_ms",
    "moving_tick_cpu_ms_excluding_observe",
    "moving_tick_rung_changes",
    "moving_tick_deferred",
    "rss_before_mb",
    "rss_after_mb",
    "peak_rss_mb",
    "bytes_per_dispatch",
    "machine_build_ms",
    "dispatch_create_us",
    "dispatches_per_second",
    "dispatch_journal_commits_per_second",
    "journal_commits_per_second",
    "run_wall_seconds",
)
"""Pooled over every run of a size (and every tick of a run, for the per-tick lists)."""


def old_tree(commit: str, into: Path) -> Path:
    """The ``src/`` and ``benchmarks/`` of ``commit``, extracted with git archive; the tree's root."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "baseline.tar"
    with archive.open("wb") as out:
        subprocess.run(
            ["git", "-C", str(REPO), "archive", commit, "src", "benchmarks"], stdout=out, check=True, timeout=120
        )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def tree_env(root: Path) -> dict[str, str]:
    """The environment that runs ``root``'s own worker on ``root``'s own fellows_fsm (first on PYTHONPATH)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}


def check_tree(root: Path) -> None:
    """Make sure a child started for ``root`` imports fellows_fsm and the worker from ``root``, not elsewhere."""
    probe = "import benchmarks.controller_cost as b, fellows_fsm as f; print(f.__file__); print(b.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, env=tree_env(root), capture_output=True, text=True, check=True
    )
    for line in out.stdout.split():
        if not Path(line).resolve().is_relative_to(root.resolve()):
            raise SystemExit(f"a child for {root} imported {line}")


def run_worker(root: Path, size: int, ticks: int, timeout: float | None) -> dict[str, Any] | None:
    """One fresh process of ``root``'s worker; its figures, or None when it ran past ``timeout`` seconds."""
    started = time.perf_counter()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.controller_cost", "--worker", str(size), "--ticks", str(ticks)],
            check=True,
            capture_output=True,
            text=True,
            cwd=root,
            env=tree_env(root),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    run: dict[str, Any] = json.loads(out.stdout)
    run["run_wall_seconds"] = time.perf_counter() - started
    return run


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """min / median / max of every figure over ``runs``; the first tick of each kind apart from the later ones."""

    def pooled(key: str) -> list[float]:
        values: list[float] = []
        for run in runs:
            value = run[key]
            values.extend(value if isinstance(value, list) else [value])
        return values

    figures: dict[str, dict[str, float | int]] = {}
    for kind in ("steady", "moving"):
        # The first steady tick gives every dispatch its first observation (every guard runs); later ones see
        # nothing new. The first moving tick is the one where every window closes at once. Split, so a max can
        # be told apart from the ticks a long-running router makes.
        ticks = [run[f"{kind}_tick_cpu_ms_excluding_observe"] for run in runs]
        figures[f"first_{kind}_tick_cpu_ms_excluding_observe"] = spread([t[0] for t in ticks])
        figures[f"later_{kind}_tick_cpu_ms_excluding_observe"] = spread([x for t in ticks for x in t[1:]])
    first_changes = [run["moving_tick_rung_changes"][0] for run in runs]
    figures["first_moving_tick_rung_changes"] = spread(first_changes)
    figures |= {key: spread(pooled(key)) for key in FIGURES if all(key in run for run in runs)}
    if all("rung_changes_per_tick" in run for run in runs):
        figures["rung_changes_per_tick"] = spread(pooled("rung_changes_per_tick"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per size and version")
    parser.add_argument("--ticks", type=int, default=10, help="ticks measured per process")
    parser.add_argument("--baseline", default=BASELINE, help="the commit whose code is 'old'")
    parser.add_argument("--old-timeout", type=float, default=300.0, help="seconds an old run may take")
    parser.add_argument("--rounds", type=int, default=1, help="the whole comparison this many times, each kept")
    parser.add_argument("--name", default="controller_cost", help="the result's name under benchmarks/results/")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        json.dump(worker(args.worker, args.ticks), sys.stdout)
        return
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout
    changed = subprocess.run(
        [*git, "status", "--porcelain", "src", "benchmarks/controller_cost.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    head = head.strip() + (" with uncommitted changes" if changed.strip() else "")
    sizes: dict[str, dict[str, Any]] = {}
    old_stopped: dict[str, Any] | None = None
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fellows-cost-") as tmp:
        trees = {"old": old_tree(args.baseline, Path(tmp) / "old"), "new": REPO}
        for root in trees.values():
            check_tree(root)
        for _ in range(args.rounds):
            started = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": os.getloadavg()[0]}
            sizes = {}
            for size in (int(s) for s in args.sizes.split(",")):
                runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
                for _ in range(args.repeats):
                    for name, root in trees.items():
                        if name == "old" and old_stopped is not None:
                            continue
                        run = run_worker(root, size, args.ticks, args.old_timeout if name == "old" else None)
                        if run is None:
                            old_stopped = {"size": size, "timeout_seconds": args.old_timeout}
                            print(f"{size} old: stopped after {args.old_timeout:g} s; old not measured from here on")
                            continue
                        runs[name].append(run)
                        print(f"{size} {name}: {run['run_wall_seconds']:.1f} s", flush=True)
                sizes[str(size)] = {name: summary(done) for name, done in runs.items() if done}
                for name, figures in sizes[str(size)].items():
                    print(f"{size} live dispatches, {name}:")
                    for key, value in figures.items():
                        print(f"  {key:44s} min {value['min']:>10} median {value['median']:>10} max {value['max']:>10}")
            rounds.append({**started, "sizes": sizes})
    path = write_result(
        args.name,
        {
            "repeats": args.repeats,
            "ticks_per_repeat": args.ticks,
            "park_cap_seconds": CAP,
            "poll_interval_seconds": POLL_SECONDS,
            "router": "Router",
            "baseline": args.baseline,
            "new": head,
            "old_stopped": old_stopped,
            "sizes": sizes,
            # --rounds N: every round's figures (``sizes`` is the last one's), when it began and the load then.
            **({"rounds": rounds} if args.rounds > 1 else {}),
        },
        module="controller_cost",
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
