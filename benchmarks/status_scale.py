"""Benchmark: `fellows-fsm status` and `history` on journals of 10,000 and 100,000 dispatches, old code and new.

No SLURM: both commands only read the journal. Each journal is built through the real lifecycle and journal API
(every dispatch submitted, most of them RUNNING, the oldest few still pending, ids random hex as the router makes
them). Then every command runs as a user runs it, in a fresh process, with two versions of fellows_fsm:

- old: the source tree of ``--baseline`` (default: the commit before the views moved to ui/), taken with
  ``git archive`` into a temporary directory;
- new: this checkout's ``src/``;

both as ``python -m fellows_fsm`` with that tree first on PYTHONPATH, the same interpreter and packages, old and
new alternating run by run. Wall time and the child's own peak RSS (``os.wait4``), min / median / max over the
repeats, and whether old and new printed the same bytes. Linux counts in a child's peak RSS the pages it shared
with this process before its exec, so the journals are built in a child process too (this one stays at its
imports' size, recorded as ``rss_floor_mb``).

    .venv/bin/python -m benchmarks.status_scale [--sizes 10000,100000] [--repeats 5] [--baseline COMMIT]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import spread, write_result

REPO = Path(__file__).resolve().parents[1]
BASELINE = "fe2f355a501ec74b6609dc9efa32742daa4c33d3"
"""main when the views were split out of view.py: status drew a rich Table, --all parsed every row."""
OLD_ALL_UP_TO = 20_000
"""The old `status --all` takes seconds per 10,000 dispatches: above this size only the new code runs it."""


def dispatch_ids(count: int) -> list[str]:
    """``count`` distinct 12-hex-digit ids, random like the router's (uuid4().hex[:12]), the same every run."""
    rng = random.Random(11)
    ids: dict[str, None] = {}
    while len(ids) < count:
        ids[f"{rng.getrandbits(48):012x}"] = None
    return list(ids)


def build_journal(path: Path, dispatches: int, live: int) -> list[str]:
    """A journal of ``dispatches`` dispatches, the oldest ``live`` of them still pending on high-eur; their ids."""
    # Imported here, in the child that builds: the parent stays small (see the module docstring).
    from fellows_fsm.core.dispatch import Dispatch  # noqa: PLC0415
    from fellows_fsm.journal.store import Journal  # noqa: PLC0415
    from fellows_fsm.lanes.slurm.config import SlurmSettings  # noqa: PLC0415
    from fellows_fsm.scheduler.fake import FakeScheduler  # noqa: PLC0415
    from fellows_fsm.scheduler.port import JobSpec  # noqa: PLC0415
    from fellows_fsm.sim.clock import SimClock  # noqa: PLC0415
    from fellows_fsm.testing import Driven  # noqa: PLC0415

    clock = SimClock(1_700_000_000.0)
    fake = FakeScheduler(clock)
    ladder = SlurmSettings(park_cap_seconds=600).ladder
    ids = dispatch_ids(dispatches)
    journal = Journal(path)
    try:
        with journal.batch():
            for i, dispatch_id in enumerate(ids):
                clock.advance_to(clock.now() + 1.0)
                spec = JobSpec(name=f"train-{i}", script="/home/me/train.sbatch", gpus=8, time_limit_seconds=3600)
                d = Driven(Dispatch(dispatch_id, spec, ladder), fake, journal, clock)
                journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=clock.now())
                d.submit()
                if i >= live:
                    assert d.job_id is not None
                    fake.start(d.job_id)
                    d.advance(fake.observe([d.job_id])[d.job_id])
    finally:
        journal.close()
    return ids


def build_in_child(path: Path, dispatches: int, live: int) -> str:
    """build_journal in a fresh process (so this one's RSS stays small); the unique prefix of its middle id."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.status_scale",
            "--build",
            str(path),
            "--sizes",
            str(dispatches),
            "--live",
            str(live),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
        cwd=REPO,
    )
    return done.stdout.strip()


def unique_prefix(ids: list[str], dispatch_id: str) -> str:
    """The shortest prefix of ``dispatch_id`` that no other id starts with (what a user types)."""
    for size in range(4, len(dispatch_id) + 1):
        prefix = dispatch_id[:size]
        if sum(1 for i in ids if i.startswith(prefix)) == 1:
            return prefix
    return dispatch_id


def old_tree(commit: str, into: Path) -> Path:
    """The ``src/`` of ``commit``, extracted with git archive; the directory to put on PYTHONPATH."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "baseline.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", commit, "src"], stdout=out, check=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def run_once(src: Path, config: Path, args: list[str], out: Path) -> tuple[float, float]:
    """Wall seconds and the child's own peak RSS (MB) of one run of ``python -m fellows_fsm`` from ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("COLUMNS", None)  # off a terminal the CLI renders 200 columns wide, as when piped
    with out.open("wb") as stdout:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "fellows_fsm", "--config", str(config), *args],
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{args} from {src} exited {child.returncode}")
    return wall, usage.ru_maxrss / 1024


def measure(trees: dict[str, Path], config: Path, args: list[str], repeats: int, tmp: Path) -> dict[str, Any]:
    """Every tree's runs of ``args``, alternating tree by tree each repeat; and whether their outputs match."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    outputs = {name: tmp / f"out-{name}.txt" for name in trees}
    for _ in range(repeats):
        for name, src in trees.items():
            runs[name].append(run_once(src, config, args, outputs[name]))
    texts = {name: path.read_bytes() for name, path in outputs.items()}
    result: dict[str, Any] = {
        name: {
            "wall_seconds": spread([r[0] for r in done]),
            "peak_rss_mb": spread([r[1] for r in done], 1),
            "output_lines": texts[name].count(b"\n"),
        }
        for name, done in runs.items()
    }
    result["same_output"] = len(set(texts.values())) == 1 if len(texts) > 1 else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000", help="Comma list of journal sizes (dispatches).")
    parser.add_argument("--live", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE, help="The commit whose code is 'old'.")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # internal: build one journal and exit
    args = parser.parse_args()
    if args.build is not None:
        ids = build_journal(args.build, int(args.sizes), args.live)
        print(unique_prefix(ids, ids[len(ids) // 2]))
        return
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout
    changed = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True, check=True).stdout
    head = head.strip() + (" with uncommitted changes in src/" if changed.strip() else "")
    sizes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fellows-status-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"old": old_tree(args.baseline, tmp / "old"), "new": REPO / "src"}
        for size in (int(s) for s in args.sizes.split(",")):
            state = tmp / f"state-{size}"
            config = tmp / f"fellows-{size}.toml"
            config.write_text(f'state_dir = "{state}"\n', encoding="utf-8")
            started = time.perf_counter()
            prefix = build_in_child(state / "journal.sqlite3", size, args.live)
            built = time.perf_counter() - started
            variants = {
                "status": ["status"],
                "status --all": ["status", "--all"],
                f"history {prefix}": ["history", prefix],
            }
            results: dict[str, Any] = {}
            for name, argv in variants.items():
                chosen = trees if argv != ["status", "--all"] or size <= OLD_ALL_UP_TO else {"new": trees["new"]}
                results[name] = {"argv": ["fellows-fsm", *argv], **measure(chosen, config, argv, args.repeats, tmp)}
                print(size, name, results[name], flush=True)
            sizes.append({"dispatches": size, "journal_build_seconds": round(built, 1), "variants": results})
    write_result(
        "status_scale",
        {
            "live": args.live,
            "repeats": args.repeats,
            "baseline": args.baseline,
            "new": head,
            "old_all_up_to": OLD_ALL_UP_TO,
            "rss_floor_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "sizes": sizes,
        },
    )


if __name__ == "__main__":
    main()
