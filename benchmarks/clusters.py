"""Benchmark: two real SLURM clusters as lanes (issue 26), fellows here and inst over its own sshd.

1. A poll with two clusters: ``Router.poll`` with N live dispatches on each cluster (fellows: pinned to high-eur;
   inst: walked there, pending on inst-high), interleaved in the same run with a one-cluster router's poll (N live on
   fellows) and with each cluster's round trip alone (one squeue here, one over the ssh master), against the target
   "at most the slower cluster's round trip + 20 ms".
2. The decision overhead across a cluster change: dispatches walking the full fellows ladder (caps of ``--cap`` s)
   to inst; from the low-eur window's deadline, and from the tick that parked the last fellows rung, to the inst
   job's id journaled (sbatch answered over ssh), against "poll + 0.5 s".

Needs both clusters and inst's sshd; run it in a network namespace of its own:

    scripts/in-netns bench26 bash -c 'scripts/dev-slurm up >/dev/null &&
        FELLOWS_SLURM_PROFILE=inst scripts/dev-slurm up >/dev/null &&
        FELLOWS_SLURM_PROFILE=inst scripts/dev-sshd up >/dev/null && eval "$(scripts/dev-slurm env)" &&
        nice -n 10 .venv/bin/python -m benchmarks.clusters'
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import realslurm
from benchmarks.common import percentiles, spread, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.ladder import split_job_id
from fellows_fsm.core.lifecycle import window_deadline
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import LaneConfig
from fellows_fsm.lanes.slurm.config import FellowsConfig
from fellows_fsm.lanes.slurm.lane import slurm_port
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner

INST_RUNTIME = Path(f"{os.environ.get('FELLOWS_SLURM_RUNTIME', '/tmp/fellows-slurm')}-inst")
INST_ENV = {**os.environ, "SLURM_CONF": str(INST_RUNTIME / "etc" / "slurm.conf")}
INST_JOB_ARGS = ("--partition=h200", "--account=inst-acct", f"--chdir={INST_RUNTIME / 'jobs'}", "-o", "/dev/null")
TARGET_POLL_EXTRA_SECONDS = 0.02
TARGET_CHANGE_EXTRA_SECONDS = 0.5


# --------------------------------------------------------------------------- the inst cluster, from the bench's side
def inst_sbatch(qos: str, gpus: int = 8) -> str:
    """A blocker on inst (its own SLURM_CONF here, never through the router's port); its id."""
    argv = ["sbatch", "--parsable", f"--qos={qos}", f"--gres=gpu:h200:{gpus}", "--job-name=blocker", *INST_JOB_ARGS]
    out = subprocess.run([*argv, "--wrap", "sleep 900"], check=True, capture_output=True, text=True, env=INST_ENV)
    return out.stdout.strip().split(";")[0]


def inst_live() -> list[str]:
    """Every inst job pending, running or completing."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], check=False, capture_output=True, text=True, env=INST_ENV)
    return out.stdout.split()


def inst_running(job_ids: Sequence[str]) -> bool:
    """Are all these inst jobs RUNNING?"""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i %T"], check=False, capture_output=True, text=True, env=INST_ENV
    ).stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return all(states.get(j) == "RUNNING" for j in job_ids)


def empty_both() -> None:
    """Cancel every job on both clusters and wait until neither queue holds one."""
    realslurm.cancel(realslurm.live_ids())
    subprocess.run(["scancel", "-u", os.environ.get("USER", "root")], check=False, env=INST_ENV)
    end = time.monotonic() + 60
    while realslurm.live_ids() or inst_live():
        if time.monotonic() > end:
            raise RuntimeError("the queues did not empty in 60 s")
        time.sleep(0.2)


def fill_fellows() -> list[str]:
    """Every fellows rung full: this user's high-eur and normal-eur caps taken, the node's 64 GPUs busy."""
    blockers = [realslurm.sbatch(q, 8, 900, name="blocker") for q in ("high-eur",) * 2 + ("normal-eur",) * 2]
    blockers.append(realslurm.sbatch("low-eur", 32, 900, name="blocker"))
    realslurm.wait_state(blockers, "RUNNING")
    return blockers


def fill_inst(qos: Sequence[str]) -> list[str]:
    """This user's 8-GPU cap taken on each of ``qos`` on inst."""
    blockers = [inst_sbatch(q) for q in qos]
    end = time.monotonic() + 30
    while not inst_running(blockers):
        if time.monotonic() > end:
            raise RuntimeError(f"inst blockers {blockers} did not run")
        time.sleep(0.05)
    return blockers


# --------------------------------------------------------------------------- the routers
def inst_lane(cap: float) -> FellowsConfig:
    """The inst lane as `[lanes.inst] kind = "slurm"` reads it (tests/integration/two_clusters.py's lane_toml)."""
    return FellowsConfig(
        name="inst",
        host="inst-cluster",
        ssh_options=("-F", str(INST_RUNTIME / "sshd" / "ssh_config")),
        remote_workdir=str(INST_RUNTIME / "jobs"),
        partition="h200",
        account="inst-acct",
        qos="inst-high",
        qos_ladder=("inst-low",),
        gres="gpu:h200:{gpus}",
        park_cap_seconds=cap,
        park_early="off",
    )


def router(state_dir: Path, *, cap: float, poll: float, inst_cap: float | None) -> tuple[Router, dict[str, Any]]:
    """A started router on the real ports: fellows here, then (``inst_cap`` given) inst over ssh, then gcp
    (``true``); and its ports by lane."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fellows = FellowsConfig(park_cap_seconds=cap, poll_interval_seconds=poll, park_early="off")
    lanes: list[Any] = [LaneConfig(name="gcp", command=("true", "{dispatch_id}"))]
    order: tuple[str, ...] = ("fellows", "gcp")
    if inst_cap is not None:
        lanes.insert(0, inst_lane(inst_cap))
        order = ("fellows", "inst", "gcp")
    config = Config(fellows=fellows, lanes=tuple(lanes), router=RouterConfig(order=order), state_dir=state_dir)
    ports: dict[str, SlurmScheduler] = {"fellows": slurm_port(config.fellows, state_dir)}
    if inst_cap is not None:
        ports["inst"] = slurm_port(lanes[0], state_dir)
    others = {k: v for k, v in ports.items() if k != "fellows"}
    r = Router(config, ports["fellows"], Journal(config.journal_path), ports=others or None).start()
    return r, ports


def close(r: Router, ports: dict[str, SlurmScheduler]) -> None:
    """The router's journal closed and every ssh master of its ports stopped."""
    r.journal.close()
    for port in ports.values():
        transport = port.runner.transport
        if hasattr(transport, "close"):
            transport.close()


def jobs_on(r: Router, lane: str) -> list[str]:
    """The raw SLURM ids of the live dispatches' current jobs on ``lane``."""
    out = []
    for d in r.on_ladder:
        if d.job_id is not None and split_job_id(d.job_id)[0] == lane:
            out.append(split_job_id(d.job_id)[1])
    return out


# --------------------------------------------------------------------------- 1: the poll
def poll_benchmark(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    """N live on each cluster for the two-cluster router, N on fellows for the one-cluster one; interleaved polls."""
    empty_both()
    blockers = fill_fellows()
    inst_blockers = fill_inst(("inst-high", "inst-low"))
    two, two_ports = router(state / "two", cap=0.5, poll=args.poll, inst_cap=3600.0)
    one, one_ports = router(state / "one", cap=3600.0, poll=args.poll, inst_cap=None)
    try:
        walkers = [two.dispatch(realslurm.spec(f"walk-{i}", 8, 300)) for i in range(args.live)]
        end = time.monotonic() + 120
        while len(jobs_on(two, "inst")) < len(walkers):  # each walker leaves fellows' three 0.5 s rungs for inst
            if time.monotonic() > end:
                raise RuntimeError("the walkers did not all reach inst in 120 s")
            two.poll()
            time.sleep(args.poll)
        for i in range(args.live):
            two.dispatch(realslurm.spec(f"stay-{i}", 8, 300), pin="fellows")
            one.dispatch(realslurm.spec(f"one-{i}", 8, 300))
        two.poll()
        one.poll()
        fellows_ids, inst_ids = jobs_on(two, "fellows"), jobs_on(two, "inst")
        assert len(fellows_ids) == len(inst_ids) == args.live, (fellows_ids, inst_ids)
        inst_port, fellows_port = two_ports["inst"], two_ports["fellows"]
        times: dict[str, list[float]] = {"two": [], "one": [], "inst_rt": [], "fellows_rt": []}
        squeues: dict[str, list[int]] = {"fellows": [], "inst": []}
        in_poll: dict[str, list[float]] = {"fellows": [], "inst": []}  # each cluster's squeue inside the poll
        for _ in range(args.polls):
            before = {lane: port.runner.calls["squeue"] for lane, port in two_ports.items()}
            spent = {lane: port.runner.seconds["squeue"] for lane, port in two_ports.items()}
            t0 = time.perf_counter()
            two.poll()
            times["two"].append(time.perf_counter() - t0)
            for lane, port in two_ports.items():
                squeues[lane].append(port.runner.calls["squeue"] - before[lane])
                in_poll[lane].append(port.runner.seconds["squeue"] - spent[lane])
            t0 = time.perf_counter()
            one.poll()
            times["one"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            inst_port.observe(inst_ids)
            times["inst_rt"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fellows_port.observe(fellows_ids)
            times["fellows_rt"].append(time.perf_counter() - t0)
            time.sleep(0.05)
        slower = [max(a, b) for a, b in zip(in_poll["inst"], in_poll["fellows"], strict=True)]
        extra = [t - s for t, s in zip(times["two"], slower, strict=True)]
        alone = [max(a, b) for a, b in zip(times["inst_rt"], times["fellows_rt"], strict=True)]
        extra_alone = [t - s for t, s in zip(times["two"], alone, strict=True)]
        live_after = {"fellows": len(jobs_on(two, "fellows")), "inst": len(jobs_on(two, "inst"))}
    finally:
        ids = [
            split_job_id(j.job_id)[1]
            for r in (two, one)
            for row in r.journal.dispatches()
            for j in r.journal.jobs(row.id)
        ]
        close(two, two_ports)
        close(one, one_ports)
        realslurm.cancel(blockers + ids)
        subprocess.run(["scancel", *inst_blockers, *ids], check=False, env=INST_ENV, capture_output=True)
    return {
        "live_per_cluster": args.live,
        "polls": args.polls,
        "two_cluster_poll_seconds": spread(times["two"], 4),
        "one_cluster_poll_seconds": spread(times["one"], 4),
        "inst_round_trip_seconds": spread(times["inst_rt"], 4),
        "fellows_round_trip_seconds": spread(times["fellows_rt"], 4),
        "in_poll_squeue_seconds": {lane: spread(v, 4) for lane, v in in_poll.items()},
        "two_minus_slower_round_trip_seconds": spread(extra, 4),
        "two_minus_slower_round_trip_p95_seconds": percentiles(extra, 4)["p95"],
        "two_minus_slower_round_trip_alone_seconds": spread(extra_alone, 4),
        "median_two_minus_median_slower_alone_seconds": round(
            statistics.median(times["two"])
            - max(statistics.median(times["inst_rt"]), statistics.median(times["fellows_rt"])),
            4,
        ),
        "squeue_per_poll": {lane: spread([float(n) for n in counts]) for lane, counts in squeues.items()},
        "live_at_the_end": live_after,
        "target_extra_seconds": TARGET_POLL_EXTRA_SECONDS,
    }


# --------------------------------------------------------------------------- 2: the cluster change
def change_lags(journal: Journal, fellows: FellowsConfig) -> dict[str, list[float]]:
    """Per dispatch: low-eur's deadline -> inst job journaled, and the park of low-eur -> inst job journaled."""
    ladder = fellows.ladder
    last = len(ladder.rungs) - 1
    out: dict[str, list[float]] = {"deadline": [], "park": [], "cancel": []}
    for row in journal.dispatches():
        steps = journal.steps(row.id)
        jobs = {j.rung_index: j for j in journal.jobs(row.id)}
        if last + 1 not in jobs:
            continue
        deadline = 0.0
        for step in steps:
            if step.rung_index > last:
                break
            rung = ladder.rungs[step.rung_index]
            if step.trigger == "submit":
                deadline = step.at + rung.park_cap_seconds
            elif step.trigger == "resubmit":
                deadline = window_deadline(deadline, step.at, rung)
        queued = jobs[last + 1].at
        park = next(s for s in steps if s.trigger == "park" and s.rung_index == last)
        out["deadline"].append(queued - deadline)
        out["park"].append(queued - park.at)
    return out


def change_benchmark(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    """``args.dispatches`` dispatches ``args.stagger`` s apart walking the full fellows ladder to inst (inst-high
    free: the first one runs there, the rest pend on its per-user cap); the router's own loop, one poll a second."""
    empty_both()
    blockers = fill_fellows()
    r, ports = router(state / "change", cap=args.cap, poll=args.poll, inst_cap=600.0)
    fellows = FellowsConfig(park_cap_seconds=args.cap, park_early="off")
    try:
        specs = [realslurm.spec(f"chg-{i}", 8, 300) for i in range(args.dispatches)]
        due = [time.time() + i * args.stagger for i in range(len(specs))]
        sent = 0

        def sleep(seconds: float) -> None:
            nonlocal sent
            wake = time.time() + seconds
            while sent < len(specs) and due[sent] <= wake:
                time.sleep(max(0.0, due[sent] - time.time()))
                r.dispatch(specs[sent])
                sent += 1
            time.sleep(max(0.0, wake - time.time()))

        def arrived(_report: object) -> bool:
            """Every dispatch sent has its inst job (rung 3: fellows' three rungs before it) journaled."""
            rows = r.journal.dispatches()
            return sent == len(specs) and all(any(j.rung_index == 3 for j in r.journal.jobs(d.id)) for d in rows)

        r.dispatch(specs[0])
        sent = 1
        r.run(until=arrived, sleep=sleep)
        lags = change_lags(r.journal, fellows)
        commands = {lane: dict(p.runner.calls) for lane, p in ports.items()}
        means = {
            lane: {n: round(p.runner.seconds[n] / c, 4) for n, c in p.runner.calls.items() if c}
            for lane, p in ports.items()
        }
    finally:
        ids = [split_job_id(j.job_id)[1] for row in r.journal.dispatches() for j in r.journal.jobs(row.id)]
        close(r, ports)
        realslurm.cancel(blockers + ids)
        subprocess.run(["scancel", *ids], check=False, env=INST_ENV, capture_output=True)
    return {
        "dispatches": args.dispatches,
        "stagger_seconds": args.stagger,
        "fellows_cap_seconds": args.cap,
        "poll_interval_seconds": args.poll,
        "reached_inst": len(lags["deadline"]),
        "last_fellows_deadline_to_inst_job_queued_seconds": percentiles(lags["deadline"]),
        "park_tick_to_inst_job_queued_seconds": percentiles(lags["park"]),
        "deadline_lags_seconds": sorted(round(x, 3) for x in lags["deadline"]),
        "commands": commands,
        "command_seconds_mean": means,
        "target_seconds": args.poll + TARGET_CHANGE_EXTRA_SECONDS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", type=int, default=10, help="live dispatches on each cluster (poll benchmark)")
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--dispatches", type=int, default=6, help="dispatches walking to inst (change benchmark)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of the change benchmark, pooled")
    parser.add_argument("--cap", type=float, default=3.0, help="park cap of every fellows rung, seconds")
    parser.add_argument("--poll", type=float, default=1.0, help="poll interval, seconds")
    parser.add_argument("--stagger", type=float, default=0.5)
    args = parser.parse_args()
    version = SlurmScheduler(CommandRunner()).scancel_version()
    with tempfile.TemporaryDirectory(prefix="fellows-clusters-") as tmp:
        state = Path(tmp)
        poll = poll_benchmark(args, state)
        runs = [change_benchmark(args, state / f"r{i}") for i in range(args.repeats)]
    empty_both()
    deadline = [x for run in runs for x in run.pop("deadline_lags_seconds")]
    result = {
        "slurm": f"{version[0]}.{version[1]:02d}.{version[2]}",
        "poll": poll,
        "change": {
            "runs": runs,
            "last_fellows_deadline_to_inst_job_queued_seconds": percentiles(deadline),
            "max_per_run": spread([run["last_fellows_deadline_to_inst_job_queued_seconds"]["max"] for run in runs]),
            "target_seconds": args.poll + TARGET_CHANGE_EXTRA_SECONDS,
        },
    }
    suffix = "" if version[:2] == (22, 5) else f"_slurm{version[0]}.{version[1]:02d}"
    path = write_result("clusters" + suffix, result, module="clusters")
    print(path.read_text())


if __name__ == "__main__":
    main()
