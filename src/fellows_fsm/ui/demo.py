"""``fellows-fsm demo``: the ladder walked live on the real SLURM, with the user's own jobs filling a cap.

It fills the user's high-eur GPU cap with two jobs of its own, submits an 8-GPU job through the Python API,
shows it park and walk to the next rung, prints its history, and cancels every job it queued.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console

from fellows_fsm.api import Fellows
from fellows_fsm.config.file import Config
from fellows_fsm.errors import FellowsError, SchedulerError, SchedulerUnreachable
from fellows_fsm.journal.history import history_entries
from fellows_fsm.journal.queries import outcome_error
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec, Phase, job_spec
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.ui import app
from fellows_fsm.ui.app import config_of, config_option, main, make_console
from fellows_fsm.ui.follow import follow_live, summary
from fellows_fsm.ui.history import history_table
from fellows_fsm.ui.ladder import ladder_report, ladder_table

__all__ = ["demo"]

_DEMO_LADDER = ("high-eur", "normal-eur", "low-eur")


@main.command(short_help="Walk the ladder live on the real SLURM.")
@click.option("--cap", type=click.FloatRange(min=1.0), default=5.0, show_default=True, help="Park cap per rung (s).")
@click.option("--keep", is_flag=True, help="Keep the demo's temporary state dir (journal) and print its path.")
@config_option
@click.pass_context
def demo(ctx: click.Context, cap: float, keep: bool) -> None:
    """Walk the ladder live on the real SLURM: fill your high-eur GPU cap, submit 8 GPUs, watch it move on.

    Needs a reachable SLURM with the fellows QoS tiers (high-eur, normal-eur), here or on the config's [fellows]
    host over ssh. It cancels its own jobs at the end.
    """
    user = config_of(ctx).fellows
    console = make_console()
    workdir = Path(tempfile.mkdtemp(prefix="fellows-fsm-demo-"))
    gcp = CommandSettings(
        name="gcp",
        command=(
            sys.executable,
            "-c",
            "import sys; print('demo: here the job would go to GCP as', sys.argv[1])",
            "fsm-{dispatch_id}",
        ),
    )
    ladder = SlurmSettings(
        qos=_DEMO_LADDER[0],
        qos_ladder=_DEMO_LADDER[1:],
        park_cap_seconds=cap,
        poll_interval_seconds=1.0,
        host=user.host,
        ssh_options=user.ssh_options,
        ssh_connect_timeout_seconds=user.ssh_connect_timeout_seconds,
        remote_workdir=user.remote_workdir,
    )
    config = Config(fellows=ladder, lanes=(gcp,), state_dir=workdir / "state", source="demo")
    scheduler = app.make_scheduler(config)
    if not isinstance(scheduler, SlurmScheduler):
        raise SchedulerError(f"the demo runs on the real SLURM only, not on {type(scheduler).__name__}")
    job_ids: list[str] = []
    api: Fellows | None = None
    error: FellowsError | None = None
    try:
        _demo_check_cluster(scheduler, console)
        script = workdir / "sleep.sbatch"
        script.write_text("#!/bin/bash\n#SBATCH --time=10:00\nsleep 300\n", encoding="utf-8")
        # Over ssh the job runs in remote_workdir (or the login directory) there: a local temp dir does not exist.
        job_args = ("--output=/dev/null",) if user.host else (f"--chdir={workdir}", "--output=/dev/null")
        console.rule("1. what the cluster grants you (fellows-fsm ladder)")
        check = job_spec("demo", script, gpus=8, time_limit_seconds=600)
        console.print(ladder_table(ladder_report(config, app.read_grants(scheduler), check)))
        console.rule("2. fill your own high-eur GPU cap (16) with two 8-GPU jobs")
        job_ids += _demo_fill(scheduler, job_spec("demo-blocker", script, 8, 600, job_args))
        console.print(f"high-eur: jobs {', '.join(job_ids)} run 8 GPUs each, so your 16-GPU cap there is full")
        console.rule("3. submit an 8-GPU job: it pends on high-eur, parks, walks to normal-eur, runs")
        api = Fellows(config, scheduler=scheduler)
        error = _demo_walk(api, job_spec("demo-train", script, 8, 600, job_args), console)
        console.rule("5. clean up")
    finally:
        if api is not None:
            journal = api.journal
            job_ids += [j.job_id for r in journal.dispatches() for j in journal.jobs(r.id)]
            api.close()
        _demo_clean_up(scheduler, job_ids, console)
        if keep:
            console.print(f"kept the demo's journal: {config.journal_path}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if error is not None:
        raise error


def _demo_fill(scheduler: SlurmScheduler, blocker: JobSpec) -> list[str]:
    """Submit two 8-GPU jobs straight on high-eur through the port and wait until both run."""
    run_id = uuid.uuid4().hex[:8]
    ids = [scheduler.submit(blocker, qos="high-eur", token=f"fsm-demo-{run_id}-blocker{i}") for i in range(2)]
    _demo_wait_running(scheduler, ids)
    return ids


def _demo_walk(fellows: Fellows, spec: JobSpec, console: Console) -> FellowsError | None:
    """Dispatch ``spec``, follow it live, print its history; the error its outcome calls for, if any."""
    journal = fellows.journal
    handle = fellows.submit(spec, check=False).handle
    console.print(
        f"$ fellows-fsm submit {Path(spec.script).name}   (8 GPUs, --time 10:00: dispatch {handle.dispatch_id})"
    )
    follow_live(fellows, handle.dispatch_id, console)
    console.print(summary(handle.dispatch_id, journal))
    console.rule(f"4. fellows-fsm history {handle.dispatch_id}")
    row = journal.dispatch(handle.dispatch_id)
    assert row is not None
    entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
    console.print(history_table(row, entries))
    return outcome_error(journal, handle.dispatch_id)


def _demo_check_cluster(scheduler: SlurmScheduler, console: Console) -> None:
    transport = scheduler.runner.transport
    where = transport.where if transport.remote else f"SLURM_CONF={os.environ.get('SLURM_CONF', '(default)')}"
    ping = scheduler.runner.run(("scontrol", "ping"))
    if not ping.ok or "UP" not in ping.stdout:
        raise SchedulerUnreachable(
            f"SLURM does not answer ({where}: {ping.message}); start it, or point "
            "SLURM_CONF (or [fellows] host) at a cluster with the fellows QoS tiers"
        )
    console.print(f"SLURM answers ({ping.stdout.strip()}; {where})")


def _demo_wait_running(scheduler: SlurmScheduler, job_ids: Sequence[str], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while True:
        seen = scheduler.observe(job_ids)
        if all(seen[j].phase is Phase.STARTED for j in job_ids):
            return
        if time.monotonic() > end:
            states = ", ".join(f"{j}: {seen[j].state} {seen[j].reason or ''}".strip() for j in job_ids)
            raise SchedulerError(
                f"the demo's high-eur jobs did not start within {timeout:g} s ({states}); other jobs of yours "
                "may hold the cap: `squeue --me`"
            )
        time.sleep(0.2)


def _demo_clean_up(scheduler: SlurmScheduler, job_ids: Sequence[str], console: Console) -> None:
    for job_id in dict.fromkeys(job_ids):
        try:
            scheduler.cancel([job_id])
        except FellowsError as exc:
            console.print(f"could not cancel job {job_id}: {exc}", style="red")
    if job_ids:
        console.print(f"cancelled the demo's jobs: {', '.join(dict.fromkeys(job_ids))}")
