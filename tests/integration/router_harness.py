"""A router process for the crash tests: it drives real SLURM and can SIGKILL itself at a chosen point.

Run as ``python router_harness.py STATE_DIR dispatch SPEC_JSON --crash-at POINT`` or
``python router_harness.py STATE_DIR resume``. The kill is a real ``kill -9`` of this process, injected
by wrapping the port (test code only; the product has no crash hooks). Prints the final handles as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.vocab import FOLLOWED_STATES as FOLLOWED
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec, Observation, Workload
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner

POINTS = ("none", "before-sbatch", "after-sbatch", "after-cancel")

# The GCP "command": record the dispatch in a ledger; in crash mode, kill the router (whose pid the harness
# exports) mid-command, and go on for a while after it.
GCP_COMMAND = (
    "import os, signal, sys, time\n"
    "open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')\n"
    "if os.environ.get('HARNESS_KILL_IN_HANDOFF') == '1':\n"
    "    os.kill(int(os.environ['HARNESS_ROUTER_PID']), signal.SIGKILL)\n"
    "    time.sleep(0.5)\n"
)
GCP_PROBE = "import sys; sys.exit(0 if sys.argv[2] in open(sys.argv[1]).read().split() else 1)"


def die() -> None:
    """kill -9 this very process."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingPort:
    """The real SlurmScheduler, with a SIGKILL of this process at one chosen point."""

    def __init__(self, inner: SlurmScheduler, point: str) -> None:
        self.inner = inner
        self.point = point

    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        if self.point == "before-sbatch":
            die()  # the dispatch row and its submit step are journaled; sbatch never ran
        job_id = self.inner.submit(spec, qos=qos, token=token, deadline=deadline)
        if self.point == "after-sbatch":
            die()  # the job is queued; its id never reaches the journal
        return job_id

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        return self.inner.observe(job_ids)

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        result = self.inner.cancel_if_pending(job_ids, read_back=read_back)
        if self.point == "after-cancel" and job_ids:
            die()  # cancelled on the cluster; neither the cancel nor the resubmit is journaled
        return result

    def find_by_token(self, token: str) -> Observation | None:
        return self.inner.find_by_token(token)

    def find_tokens(self, prefix: str) -> Sequence[Observation]:
        return self.inner.find_tokens(prefix)

    def workload(self, *, since: float) -> Workload:
        return self.inner.workload(since=since)


def build(state_dir: Path, cap: float, point: str) -> Router:
    """A router on real SLURM with a ledger GCP lane (with a probe) and caps of ``cap`` seconds."""
    ledger = state_dir / "gcp.ledger"
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=cap, poll_interval_seconds=0.3),
        lanes=(
            CommandSettings(
                name="gcp",
                command=(sys.executable, "-c", GCP_COMMAND, str(ledger), "{dispatch_id}"),
                probe=(sys.executable, "-c", GCP_PROBE, str(ledger), "{dispatch_id}"),
            ),
        ),
        router=RouterConfig(controller_deadline=False),
        state_dir=state_dir,
    )
    port = CrashingPort(SlurmScheduler(CommandRunner(timeout_seconds=20)), point)
    return Router(config, port, Journal(config.journal_path)).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("mode", choices=["dispatch", "resume"])
    parser.add_argument("spec", nargs="?")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--crash-at", choices=POINTS, default="none")
    parser.add_argument("--cap", type=float, default=2.0)
    args = parser.parse_args()
    os.environ["HARNESS_ROUTER_PID"] = str(os.getpid())
    router = build(args.state_dir, args.cap, args.crash_at)
    if args.mode == "dispatch":
        spec = JobSpec(**json.loads(args.spec))
        for _ in range(args.count):
            router.dispatch(spec)
    ticks: list[dict[str, object]] = []
    # Until the walk is over: every dispatch final or running (a running job is followed to its end, not waited for).
    router.run(
        until=lambda _: (
            not router.handing and not router.running and all(d.state in FOLLOWED for d in router.live.values())
        ),
        on_tick=lambda r: ticks.append({"observed": r.observed, "changes": r.rung_changes}),
    )
    handles = [attrs.asdict(router.handle(row.id)) for row in router.journal.dispatches()]
    calls = dict(router.scheduler.inner.runner.calls) if isinstance(router.scheduler, CrashingPort) else {}
    json.dump({"handles": handles, "ticks": len(ticks), "calls": calls}, sys.stdout)


if __name__ == "__main__":
    main()
