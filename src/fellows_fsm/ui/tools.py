"""The commands around the dispatch itself: the ladder the cluster grants, the config check, the diagrams and the
simulator. (The live demo is ui/demo.py.)"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm import sim
from fellows_fsm.config.file import Config, config_warnings
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.driver.ledger import check_ledger
from fellows_fsm.errors import ConfigError
from fellows_fsm.journal import statefs
from fellows_fsm.journal.history import HistoryEntry, history_entries
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.lanes.base import LaneSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.lanes.slurm.world import bounded
from fellows_fsm.lanes.world import world_problems
from fellows_fsm.scheduler.port import Scheduler, job_spec
from fellows_fsm.scheduler.script import time_seconds
from fellows_fsm.sim.clusters import parse_cluster_options
from fellows_fsm.sim.real_workload import WORKLOADS, real_trace
from fellows_fsm.slurm.accounting import Grants
from fellows_fsm.ui import app
from fellows_fsm.ui import diagram as diagrams
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
from fellows_fsm.ui.ladder import ladder_report, ladder_table
from fellows_fsm.ui.notify import notify_facts
from fellows_fsm.ui.paths import dot_source, path_mermaid, svg
from fellows_fsm.ui.words import span

__all__ = ["config_group", "diagram", "diagram_title", "ladder", "simulate"]


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
    # Each other SLURM lane's rungs are judged on what its own cluster grants (sacctmgr there).
    others = {lane.name: app.read_grants(app.make_lane_scheduler(config, lane)) for lane in config.slurm_lanes[1:]}
    report = ladder_report(config, grants, job_spec("ladder-check", Path(), gpus, limit), clusters=others)
    if as_json:
        echo_json(report.as_json())
    else:
        make_console().print(ladder_table(report))


@main.group("config")
def config_group() -> None:
    """Check the configuration."""


@config_group.command("check", short_help="Check the config and the world it reaches.")
@click.option("--offline", is_flag=True, help="Check the file alone: ask no cluster, look at no lane.")
@config_option
@click.pass_context
def config_check(ctx: click.Context, offline: bool) -> None:
    """Load the config, print the effective ladder, caps, lanes and worst case, and check the world it reaches:
    every SLURM lane answers (here, or over ssh), its commands run, each QoS of its ladder exists and is granted
    to you, its partition and account are yours; every paid lane's library and credentials are here, every
    command lane's program is on PATH. One line per problem on stderr, and exit 3 if there is any (or if the file
    is wrong). A cluster that does not answer costs one timeout (10 s), never a hang.

    With --offline only the file is checked; its warnings (a lane program not found here, a very fast poll) go to
    stderr and leave the exit status 0.
    """
    config = config_of(ctx)
    problems: list[str] = []
    replaced: list[str] = []
    if not offline:
        problems, replaced = world_problems(
            (config.fellows, *config.other_slurm_lanes),
            config.lanes,
            lambda lane: bounded(
                app.make_scheduler(config) if lane is config.fellows else app.make_lane_scheduler(config, lane)
            ),
            _grants_reader,
        )
        problems += _ledger_problems(config)
    for warning in config_warnings(config):
        if warning not in replaced:
            click.echo(f"fellows-fsm: warning: {warning}", err=True)
    console = make_console()
    console.print(_config_view(config))
    if offline:
        console.print(Text("config OK (the file alone: --offline asked no cluster)", style="bold green"))
        return
    for problem in problems:
        click.echo(f"fellows-fsm: error: {problem}", err=True)
    if problems:
        console.print(Text(f"config has {len(problems)} problem(s): each is a line on stderr", style="bold red"))
        raise click.exceptions.Exit(ConfigError.exit_code)
    clusters = 1 + len(config.other_slurm_lanes)
    console.print(
        Text(
            f"config OK: {clusters} SLURM cluster(s) answer and grant every QoS of their ladders; every other "
            "lane can be used from here",
            style="bold green",
        )
    )


def _ledger_problems(config: Config) -> list[str]:
    """The shared [ledger] asked as submit asks it (driver/ledger.py: ``check_ledger``): a wrong password, a missing
    database, a newer schema is a problem (exit 3); one that does not answer now, a warning (the free rungs would
    go ahead)."""
    if config.ledger is None:
        return []
    try:
        warning = check_ledger(config.ledger)
    except ConfigError as exc:
        return [str(exc)]
    if warning is not None:
        click.echo(f"fellows-fsm: warning: {warning}", err=True)
    return []


def _grants_reader(scheduler: Scheduler) -> Callable[[], Grants] | None:
    """What the cluster behind ``scheduler`` grants, read through the command line's seam (``app.read_grants``,
    looked up at call time: tests give a fake its grants)."""
    return lambda: app.read_grants(scheduler)


def _paid_fact(lane: LaneSettings) -> str:
    """How a lane after the ladder is paid for and followed."""
    price = lane.price_per_gpu_hour
    follows = lane.follows
    timeout = lane.queue_timeout_seconds
    parts = [
        f"{price:g} a GPU-hour" if price is not None else "no price_per_gpu_hour (its cost is not counted)",
        "followed to its end, cancel deletes it" if follows else "not followed (no status): handed off is final",
    ]
    if timeout is not None:
        parts.append(f"deleted if queued over {span(timeout)}")
    return "; ".join(parts)


def _budget_fact(config: Config) -> str:
    """The [budget]'s limits, or that there is none."""
    budget = config.budget
    if not budget.limited:
        return "none (no limit on paid lanes)"
    limits = [
        f"{budget.paid_gpu_hours_per_day:g} paid GPU-hours a day" if budget.paid_gpu_hours_per_day else "",
        f"{budget.money(f'{budget.paid_cost_per_month:g}')} a month" if budget.paid_cost_per_month else "",
        f"{budget.max_paid_gpu_hours_per_job:g} GPU-hours a job" if budget.max_paid_gpu_hours_per_job else "",
    ]
    then = "ends it NO_BUDGET" if budget.refuse else "waits on its last free rung"
    return f"{', '.join(x for x in limits if x)}; a handoff over it {then} ({budget.timezone or 'local time'})"


def _config_view(config: Config) -> RenderableType:
    fellows = config.fellows
    whole = config.ladder_for("prod")  # every SLURM lane's rungs, in the order walked
    several = len(config.slurm_lanes) > 1
    rungs = Table(title="ladder", title_justify="left")  # the file on a line of its own: a path is never cut
    for header in ("rung", "cluster", "QoS", "park cap", "state") if several else ("rung", "QoS", "park cap", "state"):
        rungs.add_column(header, no_wrap=True)
    for rung in whole.rungs:
        where = (rung.lane,) if several else ()
        rungs.add_row(str(rung.index + 1), *where, rung.qos, span(rung.park_cap_seconds), rung.label)
    lanes = Table(title="lanes", title_justify="left")
    for header in ("lane", "command", "probe", "manual only", "timeout"):
        lanes.add_column(header, overflow="fold")  # a long path folds onto the next line, never cut
    rungs_of = {name: ": rungs {}-{}".format(*(i + 1 for i in _lane_rungs(whole, name))) for name in whole.lanes}
    lanes.add_row(fellows.name, f"(the SLURM ladder above{rungs_of[fellows.name] if several else ''})", "", "no", "")
    for lane in config.lanes:
        if lane.walks_ladder and lane in config.slurm_lanes:
            lanes.add_row(lane.name, f"(the SLURM ladder above{rungs_of[lane.name]})", "", "no", "")
            continue
        runs, probe, timeout = lane.shown()
        shown_timeout = span(timeout) if timeout is not None else ""
        lanes.add_row(lane.name, runs, probe, "yes" if lane.manual_only else "no", shown_timeout)
    debug = (
        f"{fellows.debug_qos} (cap {span(fellows.debug_park_cap_seconds or fellows.park_cap_seconds)}, "
        f"name prefix {fellows.debug_name_prefix!r})"
        if fellows.debug_qos
        else "off"
    )
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column(overflow="fold")
    caps = " (the sum of every cluster's park caps)" if several else ""
    worst = f"{span(whole.worst_case_seconds)} on the ladder before {next_lane_of(config) or '-'}{caps}"
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
    for lane in config.lanes:
        if not lane.walks_ladder:
            facts.add_row(f"paid {lane.name}", _paid_fact(lane))
    facts.add_row("budget", _budget_fact(config))
    for key, fact in notify_facts(config):  # every URL redacted, no secret's value
        facts.add_row(key, fact)
    for lane in config.slurm_lanes:
        facts.add_row(f"cluster {lane.name}" if several else "cluster", _cluster_fact(lane))
    return Group(Text(f"config {config.source}"), rungs, lanes, facts)


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


def _lane_rungs(ladder: Ladder, lane: str) -> tuple[int, int]:
    """The positions of a lane's first and last rung on the whole ladder."""
    at = [i for i, r in enumerate(ladder.rungs) if r.lane == lane]
    return at[0], at[-1]


def _cluster_fact(fellows: SlurmSettings) -> str:
    if fellows.host is None:
        conf = fellows.slurm_conf or os.environ.get("SLURM_CONF", "(default)")
        return f"the SLURM commands on PATH here (SLURM_CONF: {conf})"
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
@click.option(
    "--full", is_flag=True, help="Every row of the table with its guards, not the spine (the seed's states and loop)."
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
@config_option
@click.pass_context
def diagram(ctx: click.Context, fmt: str, dispatch_id: str | None, full: bool, output: Path | None) -> None:
    """Draw the dispatch state diagram from the machine definition: its spine (the seed's states, their
    park/cancel/resubmit/give-up loop and the paid tail), every row with --full, or one dispatch's path on it."""
    reference = SlurmSettings(park_cap_seconds=600.0)
    text: str | bytes
    if dispatch_id is None:
        if fmt == "markdown":
            text = diagrams.state_diagram_page(reference)
        elif fmt == "mermaid":
            text = diagrams.mermaid(reference.ladder) if full else diagrams.spine_mermaid(reference.ladder)
        else:
            dot = dot_source(reference.ladder, spine=not full)
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
        title = diagram_title(row, entries)
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


def diagram_title(row: DispatchRow, entries: Sequence[HistoryEntry]) -> str:
    """The title of a dispatch's path: its id, and once its ladder spans several clusters, the clusters its steps
    were on, in order (``dispatch d1 · fellows → inst``)."""
    if len({str(r.get("lane", LADDER_LANE)) for r in row.ladder}) < 2:
        return f"dispatch {row.id}"
    crossed = dict.fromkeys(e.cluster for e in entries if e.cluster is not None)
    return f"dispatch {row.id} · {' → '.join(crossed)}"


# --------------------------------------------------------------------------- simulate
@main.command(short_help="What-if: strategies and park caps on a simulated cluster.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), help="JSON-lines trace.")
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default="synthetic",
    show_default=True,
    help="Built-in workload without --trace: synthetic, or real-graham (drawn from Graham's 2021 GPU jobs).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the built-in workload.")
@click.option("--hours", type=float, default=48.0, show_default=True, help="Length of the synthetic workload.")
@click.option(
    "--strategies",
    default=",".join(sim.DEFAULT_STRATEGIES),
    show_default=True,
    help="Comma list of static, single-timeout, ladder, reason-aware (park_early own-cap), predictive "
    "(park_early estimate), calibrated-last (park_early calibrated-last), calibrated (park_early calibrated), "
    "oracle, oracle-prefer.",
)
@click.option("--park-caps", default="60,300,600", show_default=True, help="Comma list of park caps (seconds).")
@click.option("--gpus", type=int, default=64, show_default=True, help="GPUs in the simulated cluster.")
@click.option(
    "--tier",
    "tiers",
    multiple=True,
    help="NAME:PRIORITY:CAP (CAP '-' for none), repeatable; default: the fellows tiers. CLUSTER/NAME:PRIORITY:CAP "
    "is a tier (a rung, in the order given) of a --cluster.",
)
@click.option(
    "--cluster",
    "clusters",
    multiple=True,
    help="NAME:GPUS[:LOAD], repeatable: one more free cluster in the order after fellows, before GCP (LOAD: others' "
    "share of its GPUs, default 0); its tiers are --tier NAME/..., default one uncapped tier 'normal'.",
)
@click.option("--poll-interval", type=float, default=10.0, show_default=True, help="The router's poll (s).")
@click.option("--gcp-start-seconds", type=float, default=0.0, show_default=True, help="GCP time to start.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of result objects.")
def simulate(
    *,
    trace_path: Path | None,
    workload: str,
    seed: int,
    hours: float,
    strategies: str,
    park_caps: str,
    gpus: int,
    tiers: tuple[str, ...],
    clusters: tuple[str, ...],
    poll_interval: float,
    gcp_start_seconds: float,
    as_json: bool,
) -> None:
    """Replay a workload through the real router on a simulated cluster, for each strategy and park cap.

    Without --trace it uses a built-in workload (seeded): synthetic, or real-graham. Output: free-cluster share of your
    GPU-hours, p50/p95 time to start, GPU-hours sent to GCP and rung changes; with --cluster, your jobs started on
    each cluster and on GCP.
    """
    fellows_tiers, more = parse_cluster_options(clusters, tiers, seed=seed)
    if trace_path is not None:
        trace = sim.load_trace(trace_path)
    elif workload == "real-graham":
        trace = real_trace(seed=seed, hours=hours, gpus=gpus)
    else:
        trace = sim.synthetic_trace(seed=seed, hours=hours, gpus=gpus)
    params = sim.SimParams(
        gpus=gpus,
        tiers=fellows_tiers or sim.FELLOWS_TIERS,
        clusters=more,
        poll_interval_seconds=poll_interval,
        gcp_start_seconds=gcp_start_seconds,
    )
    results = sim.run_sweep(
        trace,
        strategies=sim.parse_strategies(strategies),
        park_caps=sim.parse_park_caps(park_caps),
        params=params,
    )
    width = shutil.get_terminal_size((200, 24)).columns  # $COLUMNS, else the terminal's, else wide (a pipe)
    click.echo(sim.to_json(results) if as_json else sim.format_table(results, width=width))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
