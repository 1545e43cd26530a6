"""The commands around the dispatch itself: the ladder the cluster grants, the config check, the diagrams, the
simulator and the live demo."""

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
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm import diagram as diagrams
from fellows_fsm import sim, statefs
from fellows_fsm.api import Fellows
from fellows_fsm.config import Config, FellowsConfig, Ladder, LaneConfig, Rung, config_warnings
from fellows_fsm.core.vocab import FELLOWS
from fellows_fsm.dispatch_history import history_entries
from fellows_fsm.errors import FellowsError, SchedulerError, SchedulerUnreachable
from fellows_fsm.records import outcome_error
from fellows_fsm.scheduler import JobSpec, Phase
from fellows_fsm.slurm import SlurmScheduler
from fellows_fsm.slurm.script import job_spec, time_seconds
from fellows_fsm.ui import app
from fellows_fsm.ui.app import (
    config_of,
    config_option,
    echo_json,
    find_row,
    main,
    make_console,
    next_lane_of,
    open_journal,
)
from fellows_fsm.ui.follow import follow_live, summary
from fellows_fsm.ui.history import history_table
from fellows_fsm.ui.ladder import ladder_report, ladder_table
from fellows_fsm.ui.paths import dot_source, path_mermaid, svg
from fellows_fsm.ui.words import span

__all__ = ["config_group", "demo", "diagram", "ladder", "simulate"]


# --------------------------------------------------------------------------- ladder, config check
@main.command(short_help="What the cluster grants you; the ladder.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--gpus", type=click.IntRange(min=0), metavar="N", default=8, show_default=True, help="The job to judge rungs for."
)
@click.option("--time", "time_limit", metavar="LIMIT", help="The job's wall time, e.g. 2-00:00:00.")
@config_option
@click.pass_context
def ladder(ctx: click.Context, as_json: bool, gpus: int, time_limit: str | None) -> None:
    """What the cluster grants you (QoS, priority, max wall, per-user caps) and the effective ladder."""
    config = config_of(ctx)
    limit = time_seconds(time_limit, "--time") if time_limit is not None else None
    grants = app.read_grants(app.make_scheduler(config))
    report = ladder_report(config, grants, job_spec("ladder-check", Path(), gpus, limit))
    if as_json:
        echo_json(report.as_json())
    else:
        make_console().print(ladder_table(report))


@main.group("config")
def config_group() -> None:
    """Check the configuration."""


@config_group.command("check", short_help="Load and print the effective config.")
@config_option
@click.pass_context
def config_check(ctx: click.Context) -> None:
    """Load the config and print the effective ladder, caps, lanes and worst case (exit 3 if it is wrong).

    Warnings (a lane program not found here, a very fast poll) go to stderr and leave the exit status 0.
    """
    config = config_of(ctx)
    for warning in config_warnings(config):
        click.echo(f"fellows-fsm: warning: {warning}", err=True)
    make_console().print(_config_view(config))


def _config_view(config: Config) -> RenderableType:
    fellows = config.fellows
    rungs = Table(title=f"ladder ({config.source})", title_justify="left")
    for header in ("rung", "QoS", "park cap", "state"):
        rungs.add_column(header, no_wrap=True)
    for rung in fellows.ladder.rungs:
        rungs.add_row(str(rung.index + 1), rung.qos, span(rung.park_cap_seconds), rung.label)
    lanes = Table(title="lanes", title_justify="left")
    for header in ("lane", "command", "probe", "manual only", "timeout"):
        lanes.add_column(header)
    lanes.add_row(FELLOWS, "(the SLURM ladder above)", "", "no", "")
    for lane in config.lanes:
        probe = " ".join(lane.probe) if lane.probe else "-"
        lanes.add_row(
            lane.name, " ".join(lane.command), probe, "yes" if lane.manual_only else "no", span(lane.timeout_seconds)
        )
    debug = (
        f"{fellows.debug_qos} (cap {span(fellows.debug_park_cap_seconds or fellows.park_cap_seconds)}, "
        f"name prefix {fellows.debug_name_prefix!r})"
        if fellows.debug_qos
        else "off"
    )
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    worst = f"{span(fellows.worst_case_seconds)} on the ladder before {next_lane_of(config) or '-'}"
    facts.add_row("worst case", worst)
    poll = fellows.poll_interval_seconds
    every = span(poll) if poll >= 1 else f"{poll:g}s"
    facts.add_row("poll", f"every {every} (one squeue for every live job)")
    facts.add_row("debug intent", debug)
    facts.add_row("order", " -> ".join(config.auto_order))
    derived = "" if config.router.max_rung_changes_per_tick is not None else " (derived from the poll interval)"
    facts.add_row("rung changes", f"at most {config.rung_changes_per_tick} per poll{derived}")
    facts.add_row("controller deadline", "on (sbatch --deadline)" if config.router.controller_deadline else "off")
    facts.add_row("journal", _journal_fact(config))
    facts.add_row("cluster", _cluster_fact(fellows))
    return Group(rungs, lanes, facts, Text("config OK", style="bold green"))


def _journal_fact(config: Config) -> str:
    try:
        fs = statefs.filesystem_of(config.state_dir)
    except OSError as exc:
        return f"{config.journal_path} (filesystem unreadable: {exc.strerror})"
    if not fs.network:
        return f"{config.journal_path} (local disk: {fs.name})"
    if config.allow_network_state_dir:
        return f"{config.journal_path} ({fs.name}, a network filesystem: allowed, no WAL; one host only)"
    return f"{config.journal_path} ({fs.name}, a network filesystem: refused for driving; status and history work)"


def _cluster_fact(fellows: FellowsConfig) -> str:
    if fellows.host is None:
        return "the SLURM commands on PATH here (SLURM_CONF: " + os.environ.get("SLURM_CONF", "(default)") + ")"
    options = f", ssh options {' '.join(fellows.ssh_options)}" if fellows.ssh_options else ""
    workdir = fellows.remote_workdir or "the login directory"
    return (
        f"{fellows.host} over ssh (one shared master connection, batch mode, connect timeout "
        f"{fellows.ssh_connect_timeout_seconds:g} s{options}); jobs run in {workdir} unless the script says --chdir"
    )


# --------------------------------------------------------------------------- diagram
@main.command(short_help="Draw the state diagram (or a path).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "markdown", "dot", "svg"]),
    default="mermaid",
    show_default=True,
    help="mermaid: the diagram; markdown: the docs/state-diagram.md page; dot/svg need the [graphviz] extra.",
)
@click.option("--dispatch", "dispatch_id", metavar="ID", help="Draw the path this dispatch took, with times.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
@config_option
@click.pass_context
def diagram(ctx: click.Context, fmt: str, dispatch_id: str | None, output: Path | None) -> None:
    """Draw the dispatch state diagram from the machine definition (optionally one dispatch's path on it)."""
    reference = FellowsConfig(park_cap_seconds=600.0)
    text: str | bytes
    if dispatch_id is None:
        if fmt == "markdown":
            text = diagrams.state_diagram_page(reference)
        elif fmt == "mermaid":
            text = diagrams.mermaid(reference.ladder)
        else:
            dot = dot_source(reference.ladder)
            text = dot if fmt == "dot" else svg(dot)
    else:
        if fmt == "markdown":
            raise click.BadParameter(
                "--dispatch draws mermaid, dot or svg, not the markdown page", param_hint="--format"
            )
        config = config_of(ctx)
        with open_journal(config, readonly=True) as journal:
            row = find_row(journal, dispatch_id)
            entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
        if not row.ladder:
            raise click.BadParameter(f"dispatch {row.id} went straight to lane {row.lane}: it has no ladder path")
        path_ladder = Ladder(tuple(Rung(**r) for r in row.ladder))
        title = f"dispatch {row.id}"
        if fmt == "mermaid":
            text = path_mermaid(path_ladder, entries, title=title)
        else:
            dot = dot_source(path_ladder, entries, title=title)
            text = dot if fmt == "dot" else svg(dot)
    if output is None:
        if isinstance(text, bytes):
            click.echo(text, nl=False)
        else:
            click.echo(text, nl=False)
    elif isinstance(text, bytes):
        output.write_bytes(text)
    else:
        output.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- demo
_DEMO_LADDER = ("high-eur", "normal-eur", "low-eur")


@main.command(short_help="What-if: strategies and park caps on a simulated cluster.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), help="JSON-lines trace.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the built-in synthetic workload.")
@click.option("--hours", type=float, default=48.0, show_default=True, help="Length of the synthetic workload.")
@click.option(
    "--strategies",
    default=",".join(sim.DEFAULT_STRATEGIES),
    show_default=True,
    help="Comma list of static, single-timeout, ladder, reason-aware (park_early own-cap), predictive "
    "(park_early estimate), calibrated (park_early calibrated), oracle, oracle-prefer.",
)
@click.option("--park-caps", default="60,300,600", show_default=True, help="Comma list of park caps (seconds).")
@click.option("--gpus", type=int, default=64, show_default=True, help="GPUs in the simulated cluster.")
@click.option(
    "--tier",
    "tiers",
    multiple=True,
    help="NAME:PRIORITY:CAP (CAP '-' for none), repeatable; default: the fellows tiers.",
)
@click.option("--poll-interval", type=float, default=10.0, show_default=True, help="The router's poll (s).")
@click.option("--gcp-start-seconds", type=float, default=0.0, show_default=True, help="GCP time to start.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of result objects.")
def simulate(
    *,
    trace_path: Path | None,
    seed: int,
    hours: float,
    strategies: str,
    park_caps: str,
    gpus: int,
    tiers: tuple[str, ...],
    poll_interval: float,
    gcp_start_seconds: float,
    as_json: bool,
) -> None:
    """Replay a workload through the real router on a simulated cluster, for each strategy and park cap.

    Without --trace it uses the built-in synthetic workload (seeded). Output: free-cluster share of your
    GPU-hours, p50/p95 time to start, GPU-hours sent to GCP and rung changes.
    """
    if trace_path is not None:
        trace = sim.load_trace(trace_path)
    else:
        trace = sim.synthetic_trace(seed=seed, hours=hours, gpus=gpus)
    params = sim.SimParams(
        gpus=gpus,
        tiers=tuple(sim.parse_tier(t) for t in tiers) if tiers else sim.FELLOWS_TIERS,
        poll_interval_seconds=poll_interval,
        gcp_start_seconds=gcp_start_seconds,
    )
    results = sim.run_sweep(
        trace,
        strategies=sim.parse_strategies(strategies),
        park_caps=sim.parse_park_caps(park_caps),
        params=params,
    )
    click.echo(sim.to_json(results) if as_json else sim.format_table(results))


@main.command(short_help="Walk the ladder live on the real SLURM.")
@click.option("--cap", type=click.FloatRange(min=1.0), default=5.0, show_default=True, help="Park cap per rung (s).")
@click.option("--keep", is_flag=True, help="Keep the demo's temporary state dir (journal) and print its path.")
@config_option
@click.pass_context
def demo(ctx: click.Context, cap: float, keep: bool) -> None:
    """Walk the ladder live on the real SLURM: fill your high-eur GPU cap, submit 8 GPUs, watch it move on.

    Needs a reachable SLURM with the fellows QoS tiers (scripts/dev-slurm up), here or on the config's [fellows]
    host over ssh. It cancels its own jobs at the end.
    """
    user = config_of(ctx).fellows
    console = make_console()
    workdir = Path(tempfile.mkdtemp(prefix="fellows-fsm-demo-"))
    gcp = LaneConfig(
        name="gcp",
        command=(
            sys.executable,
            "-c",
            "import sys; print('demo: here the job would go to GCP as', sys.argv[1])",
            "fsm-{dispatch_id}",
        ),
    )
    ladder = FellowsConfig(
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
            f"SLURM does not answer ({where}: {ping.message}); start the local one with "
            '`scripts/dev-slurm up && eval "$(scripts/dev-slurm env)"`'
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
