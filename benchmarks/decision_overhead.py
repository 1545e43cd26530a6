"""Benchmark a: decision overhead of the real router on the real local SLURM, and SLURM's own floor.

20 dispatches (8 GPUs each) walk high-eur and normal-eur (both at this user's 16-GPU cap, held by running
blocker jobs) and low-eur (the cluster full), then go to GCP (a real command lane: ``true``). From the
journal: time from each rung's deadline to the next rung's job being queued (sbatch returned), and from
the last deadline to the GCP handoff. Then SLURM's floor in the same run: scancel of a pending job, sbatch
of another, until it is RUNNING. Run it under the shared lock:

    flock /tmp/fellows-slurm-tests.lock sh -c 'scripts/dev-slurm up >/dev/null &&
        eval "$(scripts/dev-slurm env)" && .venv/bin/python -m benchmarks.decision_overhead'

and on SLURM 24.11 (Debian 13 root, its own namespaces; the result is written as decision_overhead_slurm24.11):

    scripts/dev-slurm --slurm 24.11 venv && scripts/dev-slurm --slurm 24.11 up >/dev/null &&
        scripts/dev-slurm --slurm 24.11 exec .venv-24.11/bin/python -m benchmarks.decision_overhead
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from benchmarks import realslurm
from benchmarks.common import percentiles, spread, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.config.notify import NotifyConfig, SinkConfig
from fellows_fsm.core.lifecycle import window_deadline
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.notify.service import Notifier
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner


def overheads(journal: Journal, caps: float) -> tuple[list[float], list[float], list[float], int]:
    """Per rung change: next rung's job queued minus the rung's deadline; per dispatch: handoff minus last deadline."""
    config = SlurmSettings(park_cap_seconds=caps)
    ladder = config.ladder
    rung_lag: list[float] = []
    handoff_lag: list[float] = []
    handoff_start_lag: list[float] = []
    walked = 0
    for row in journal.dispatches():
        steps = journal.steps(row.id)
        jobs = {j.rung_index: j for j in journal.jobs(row.id)}
        deadline = 0.0
        deadlines: dict[int, float] = {}
        for step in steps:
            rung = ladder.rungs[step.rung_index]
            if step.trigger == "submit":
                deadline = step.at + rung.park_cap_seconds
                deadlines[0] = deadline
            elif step.trigger == "resubmit":
                deadline = window_deadline(deadline, step.at, rung)
                deadlines[step.rung_index] = deadline
        for index, job in jobs.items():
            if index > 0:
                rung_lag.append(job.at - deadlines[index - 1])
        handoff = journal.handoff(row.id)
        if handoff is not None and handoff.finished_at is not None:
            walked += 1
            handoff_lag.append(handoff.finished_at - deadlines[len(ladder.rungs) - 1])
            handoff_start_lag.append(handoff.started_at - deadlines[len(ladder.rungs) - 1])
    return rung_lag, handoff_lag, handoff_start_lag, walked


def floor(repeats: int) -> dict[str, object]:
    """SLURM alone: scancel a pending job, sbatch another on a free QoS, wait for RUNNING (squeue every 20 ms)."""
    totals, cancels, submits = [], [], []
    for _ in range(repeats):
        pending = realslurm.sbatch("high-eur", 8, 300)  # high-eur is at this user's cap: it pends
        realslurm.wait_state([pending], "PENDING")
        time.sleep(0.3)
        t0 = time.perf_counter()
        runner = CommandRunner()
        runner.run(("scancel", "--state=PENDING", pending))
        t1 = time.perf_counter()
        job = realslurm.sbatch("low-eur", 8, 300)
        t2 = time.perf_counter()
        realslurm.wait_state([job], "RUNNING", tick=0.01)
        t3 = time.perf_counter()
        totals.append(t3 - t0)
        cancels.append(t1 - t0)
        submits.append(t2 - t1)
        realslurm.cancel([job, pending])
        realslurm.wait_state([job], "CANCELLED", tick=0.05)
    return {
        "scancel_sbatch_running_seconds": spread(totals),
        "scancel_seconds": spread(cancels),
        "sbatch_seconds": spread(submits),
    }


def _hanging_receiver() -> ThreadingHTTPServer:
    """A loopback HTTP server that reads each request and never answers (until it is shut down)."""

    class Hang(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            server.requests += 1  # type: ignore[attr-defined]
            time.sleep(3600)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    server.requests = 0  # type: ignore[attr-defined]
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def scenario(args: argparse.Namespace, port: SlurmScheduler | None = None, *, sink: bool = False) -> dict[str, Any]:
    """One run: blockers, ``args.dispatches`` dispatches walking the whole ladder, the lags from the journal
    (``port``: the router's port, default the local SLURM commands; benchmarks.ssh_transport passes one over ssh)."""
    realslurm.cancel(realslurm.live_ids())
    realslurm.wait_empty()
    blockers = [
        realslurm.sbatch(q, 8, 600, name="blocker") for q in ("high-eur", "high-eur", "normal-eur", "normal-eur")
    ]
    blockers.append(realslurm.sbatch("low-eur", 32, 600, name="blocker"))
    realslurm.wait_state(blockers, "RUNNING")
    port = port or SlurmScheduler(CommandRunner(timeout_seconds=30))
    with tempfile.TemporaryDirectory(prefix="fellows-overhead-") as state_dir:
        hanging = _hanging_receiver() if sink else None
        notify = NotifyConfig()
        if hanging is not None:  # every event to a receiver that reads the request and never answers
            url = f"http://127.0.0.1:{hanging.server_address[1]}/hook"
            notify = NotifyConfig(sinks=(SinkConfig.from_table("never", {"url": url, "timeout_seconds": 30}),))
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=args.cap, poll_interval_seconds=args.poll, park_early="off"),
            lanes=(CommandSettings(name="gcp", command=("true", "{dispatch_id}")),),
            router=RouterConfig(),
            notify=notify,
            state_dir=state_dir,
        )
        journal = Journal(config.journal_path)
        notifier = Notifier(config, journal).start()  # as the driver runs it (driver/process.py: serve)
        router = Router(config, port, journal).start()
        specs = [realslurm.spec(f"ovh-{i}", 8, 300) for i in range(args.dispatches)]
        due = [time.time() + i * args.stagger for i in range(len(specs))]
        sent = 0
        polls = 0

        def sleep(seconds: float) -> None:
            nonlocal sent
            wake = time.time() + seconds
            while sent < len(specs) and due[sent] <= wake:
                time.sleep(max(0.0, due[sent] - time.time()))
                router.dispatch(specs[sent])
                sent += 1
            time.sleep(max(0.0, wake - time.time()))

        def count(_report: object) -> None:
            nonlocal polls
            polls += 1
            notifier.on_tick()

        started = time.time()
        try:
            router.dispatch(specs[0])
            sent = 1
            while sent < len(specs) or router.live:
                router.run(sleep=sleep, on_tick=count)
                if sent < len(specs):
                    sleep(due[sent] - time.time())
            seconds = time.time() - started
            rung_lag, handoff_lag, handoff_start_lag, walked = overheads(journal, args.cap)
        finally:
            ids = [job.job_id for row in journal.dispatches() for job in journal.jobs(row.id)]
            sent_events = sum(journal.delivery_counts().values())  # attempts answered (or timed out) by now
            received = int(getattr(hanging, "requests", 0))  # requests the hanging receiver read
            notifier.stop()
            if hanging is not None:
                hanging.shutdown()
                hanging.server_close()
            journal.close()
            realslurm.cancel(ids + blockers)
    return {
        "rung_lag": rung_lag,
        "handoff_lag": handoff_lag,
        "handoff_start_lag": handoff_start_lag,
        "walked": walked,
        "seconds": round(seconds, 1),
        "polls": polls,
        "events_attempted": sent_events,
        "requests_received_by_the_hanging_sink": received,
        "commands": dict(port.runner.calls),
        "command_seconds_mean": {
            name: round(port.runner.seconds[name] / n, 4) for name, n in port.runner.calls.items() if n
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dispatches", type=int, default=20)
    parser.add_argument("--cap", type=float, default=3.0, help="park cap of every rung, seconds")
    parser.add_argument("--poll", type=float, default=1.0, help="poll interval, seconds")
    parser.add_argument("--stagger", type=float, default=0.5, help="seconds between two dispatches (0: a burst)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the whole scenario, pooled")
    parser.add_argument("--floor-repeats", type=int, default=10)
    parser.add_argument(
        "--hanging-sink", action="store_true", help="a [notify] webhook sink whose receiver never answers"
    )
    args = parser.parse_args()
    version = SlurmScheduler(CommandRunner()).scancel_version()
    runs, baseline = [], []
    for _ in range(args.repeats):  # with --hanging-sink, a run without any sink before each: both saw the same load
        if args.hanging_sink:
            baseline.append(scenario(args))
        runs.append(scenario(args, sink=args.hanging_sink))
    blocker = realslurm.sbatch("high-eur", 8, 600, name="blocker")
    blocker2 = realslurm.sbatch("high-eur", 8, 600, name="blocker")
    try:
        realslurm.wait_state([blocker, blocker2], "RUNNING")  # high-eur at this user's cap for the floor
        slurm_floor = floor(args.floor_repeats)
    finally:
        realslurm.cancel([blocker, blocker2])
    rung_lag = [x for run in runs for x in run["rung_lag"]]
    handoff_lag = [x for run in runs for x in run["handoff_lag"]]
    handoff_start_lag = [x for run in runs for x in run["handoff_start_lag"]]
    target = args.poll + 0.3
    result = {
        "slurm": f"{version[0]}.{version[1]:02d}.{version[2]}",
        "dispatches": args.dispatches,
        "repeats": args.repeats,
        "handed_to_gcp": sum(run["walked"] for run in runs),
        "park_cap_seconds": args.cap,
        "poll_interval_seconds": args.poll,
        "stagger_seconds": args.stagger,
        "router": "Router",
        "hanging_sink": args.hanging_sink,
        **(
            {
                "baseline_no_sink_rung_deadline_to_next_job_queued_seconds": percentiles(
                    [x for run in baseline for x in run["rung_lag"]]
                ),
                "baseline_no_sink_last_deadline_to_gcp_handoff_started_seconds": percentiles(
                    [x for run in baseline for x in run["handoff_start_lag"]]
                ),
            }
            if baseline
            else {}
        ),
        "runs": [{k: v for k, v in run.items() if not k.endswith("lag")} for run in runs],
        "rung_deadline_to_next_job_queued_seconds": percentiles(rung_lag),
        "last_deadline_to_gcp_handoff_done_seconds": percentiles(handoff_lag),
        "last_deadline_to_gcp_handoff_started_seconds": percentiles(handoff_start_lag),
        "rung_lag_max_per_repeat": spread([max(run["rung_lag"]) for run in runs]),
        "handoff_lag_max_per_repeat": spread([max(run["handoff_lag"]) for run in runs]),
        "target_seconds": target,
        "rung_lags_seconds": sorted(round(x, 3) for x in rung_lag),
        "handoff_lags_seconds": sorted(round(x, 3) for x in handoff_lag),
        "slurm_floor": slurm_floor,
    }
    print(
        f"{args.repeats} x {args.dispatches} dispatches, caps {args.cap} s, poll {args.poll} s, "
        f"{result['handed_to_gcp']} handed to GCP"
    )
    print(f"  deadline -> next rung queued: {result['rung_deadline_to_next_job_queued_seconds']}")
    print(f"  last deadline -> GCP handoff done: {result['last_deadline_to_gcp_handoff_done_seconds']}")
    print(f"  target: at most {target} s")
    print(f"  SLURM floor (scancel + sbatch + RUNNING): {slurm_floor['scancel_sbatch_running_seconds']}")
    # The host's SLURM (22.05) keeps the plain names; another version's run is written beside it.
    suffix = "" if version[:2] == (22, 5) else f"_slurm{version[0]}.{version[1]:02d}"
    sink = "_hanging_sink" if args.hanging_sink else ""
    name = "decision_overhead" + ("" if args.stagger > 0 else "_burst") + sink + suffix
    print(f"wrote {write_result(name, result, module='decision_overhead')}")


if __name__ == "__main__":
    main()
