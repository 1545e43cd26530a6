"""Benchmark: the SLURM port here against the same port over ssh (scripts/dev-sshd on loopback), side by side in
one run: round trips and new ssh connections per poll, submit-to-queued, and the decision overhead past a cap.

Needs the local SLURM and the loopback sshd; run it in a network namespace of its own:

    scripts/in-netns bench19 nice -n 10 bash -c 'scripts/dev-slurm up >/dev/null && scripts/dev-sshd up \
        >/dev/null && eval "$(scripts/dev-slurm env)" && eval "$(scripts/dev-sshd env)" &&
        .venv/bin/python -m benchmarks.ssh_transport'
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import realslurm
from benchmarks.common import spread, write_result
from benchmarks.decision_overhead import scenario
from fellows_fsm.config.file import Config
from fellows_fsm.lanes.slurm.config import FellowsConfig
from fellows_fsm.lanes.slurm.lane import slurm_scheduler
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.slurm.transport import SshTransport


def ssh_port(state_dir: Path) -> SlurmScheduler:
    """The port as `[fellows] host` builds it, over the loopback sshd's ssh config."""
    fellows = FellowsConfig(host=os.environ["FELLOWS_SSH_HOST"], ssh_options=("-F", os.environ["FELLOWS_SSH_CONFIG"]))
    return slurm_scheduler(Config(fellows=fellows, state_dir=state_dir))


def connections() -> int:
    """ssh connections the loopback sshd accepted so far (its VERBOSE log names each one)."""
    log = Path(os.environ["FELLOWS_SSH_CONFIG"]).parent / "sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey")


def polls(local: SlurmScheduler, remote: SlurmScheduler, ids: list[str], count: int) -> dict[str, Any]:
    """``count`` observes of ``ids`` through each port, interleaved; per ssh poll, its commands and new connections."""
    remote.observe(ids)  # opens the master: the polls below must not open another
    times: dict[str, list[float]] = {"local": [], "ssh": []}
    commands: list[int] = []
    new_connections: list[int] = []
    for _ in range(count):
        t0 = time.perf_counter()
        local.observe(ids)
        times["local"].append(time.perf_counter() - t0)
        calls, before = sum(remote.runner.calls.values()), connections()
        t0 = time.perf_counter()
        remote.observe(ids)
        times["ssh"].append(time.perf_counter() - t0)
        commands.append(sum(remote.runner.calls.values()) - calls)
        new_connections.append(connections() - before)
    extra = [s - lo for s, lo in zip(times["ssh"], times["local"], strict=True)]
    return {
        "live_jobs": len(ids),
        "polls": count,
        "local_seconds": spread(times["local"], 4),
        "ssh_seconds": spread(times["ssh"], 4),
        "ssh_extra_seconds": spread(extra, 4),
        "ssh_commands_per_poll": spread([float(c) for c in commands]),
        "new_connections_per_poll": spread([float(c) for c in new_connections]),
    }


def submits(local: SlurmScheduler, remote: SlurmScheduler, count: int) -> dict[str, Any]:
    """``count`` sbatch through each port (interleaved) until the job id is back: submit-to-queued."""
    times: dict[str, list[float]] = {"local": [], "ssh": []}
    ids: list[str] = []
    for i in range(count):
        for name, port in (("local", local), ("ssh", remote)):
            spec = JobSpec(f"sub-{name}-{i}", realslurm.script(300), gpus=8, extra_args=realslurm.job_args())
            t0 = time.perf_counter()
            ids.append(port.submit(spec, qos="high-eur", token=f"fsm-bench-{name}-{i}"))
            times[name].append(time.perf_counter() - t0)
        realslurm.cancel(ids)
    return {name: spread(values, 4) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--submits", type=int, default=10)
    parser.add_argument("--dispatches", type=int, default=6)
    parser.add_argument("--cap", type=float, default=3.0)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args()
    local = SlurmScheduler(CommandRunner(timeout_seconds=30))
    with tempfile.TemporaryDirectory(prefix="fellows-ssh-bench-") as state:
        remote = ssh_port(Path(state))
        assert isinstance(remote.runner.transport, SshTransport)
        try:
            realslurm.cancel(realslurm.live_ids())
            realslurm.wait_empty()
            blockers = [realslurm.sbatch("high-eur", 8, 600, name="blocker") for _ in range(2)]
            realslurm.wait_state(blockers, "RUNNING")
            pending = [realslurm.sbatch("high-eur", 8, 600, name="pending") for _ in range(10)]
            poll = polls(local, remote, blockers + pending, args.polls)
            realslurm.cancel(blockers + pending)
            realslurm.wait_empty()
            submit = submits(local, remote, args.submits)
            realslurm.wait_empty()
            walk = argparse.Namespace(dispatches=args.dispatches, cap=args.cap, poll=args.poll, stagger=0.5)
            overhead = {}
            for name, port in (("local", local), ("ssh", remote)):
                run = scenario(walk, port)
                overhead[name] = {
                    "rung_deadline_to_next_job_queued_seconds": spread(run["rung_lag"], 3),
                    "commands": run["commands"],
                    "command_seconds_mean": run["command_seconds_mean"],
                }
            masters = connections()
        finally:
            remote.runner.transport.close()
    path = write_result(
        "ssh_transport",
        {
            "poll": poll,
            "submit_to_queued_seconds": submit,
            "decision_overhead": overhead,
            "walk": {"dispatches": args.dispatches, "cap_seconds": args.cap, "poll_seconds": args.poll},
            "sshd_connections_in_the_whole_run": masters,
            "target_extra_per_poll_seconds": 0.05,
        },
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
