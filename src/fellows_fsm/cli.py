"""The ``fellows-fsm`` command line: the dispatch commands (submit, watch, status, history, cancel), thin over the
Python API (api.py). The group, the seams to the cluster and what every command shares live in ui/app.py; the live
views in ui/follow.py; the other commands in ui/ (tools.py, demo.py, init.py, many.py). Every FellowsError becomes
one line on stderr and its own exit code (errors.py); ``--debug`` shows tracebacks."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import click
from rich.console import Console

from fellows_fsm.clock import SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import Outcome
from fellows_fsm.driver.inbox import scancel_waits
from fellows_fsm.errors import FellowsError, Interrupted, SchedulerUnreachable, UsageError
from fellows_fsm.journal.history import budget_reason, history_entries, waits_for_budget
from fellows_fsm.journal.queries import RECENT, outcome_error, select
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.snapshot import Snapshot, dispatch_json, paid_facts, shows_paid
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui import app
from fellows_fsm.ui import completion as _completion_command
from fellows_fsm.ui import demo as _demo_command
from fellows_fsm.ui import driver as _driver_commands
from fellows_fsm.ui import init as _init_commands
from fellows_fsm.ui import journal as _journal_commands
from fellows_fsm.ui import logs as _logs_command
from fellows_fsm.ui import notify as _notify_commands
from fellows_fsm.ui import spend as _spend_command
from fellows_fsm.ui import tools as _tool_commands
from fellows_fsm.ui import wait as _wait_command
from fellows_fsm.ui.app import (
    INTERRUPTED,
    config_of,
    config_option,
    echo_json,
    find_row,
    main,
    make_console,
    next_lane_of,
    open_fellows,
    open_journal,
    say_started,
)
from fellows_fsm.ui.follow import LiveState, follow_live, live, summary, watch_view
from fellows_fsm.ui.history import history_table
from fellows_fsm.ui.init import config_header, none_in, where_config
from fellows_fsm.ui.ledger import read_team, team_json, team_table
from fellows_fsm.ui.many import script_specs, split_scripts, submit_scripts
from fellows_fsm.ui.status import status_table
from fellows_fsm.ui.submitting import (
    dispatch_object,
    handed_or_waiting,
    hands_off,
    naming_the_journaled,
    quiet,
    say_who_drives,
    wait_until_queued,
)
from fellows_fsm.ui.wrap import wrapped

# The console script's entry point (pyproject.toml): the group of ui/app.py, with every command of this module on it.
__all__ = ["main"]
# register driver, demo, spend, the tools, init and config path, completion, journal compact and check, wait,
# notify and metrics, logs
_ = (_driver_commands, _demo_command, _tool_commands, _spend_command, _init_commands, _completion_command)
__ = _journal_commands, _wait_command, _notify_commands, _logs_command

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- submit
@main.command(context_settings={"show_default": True}, short_help="Dispatch an sbatch script and follow it.")
# The script is checked by read_script_defaults (one line; a FIFO is refused unopened), not by click.
@click.argument("script", type=click.Path(path_type=Path), required=False)
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED, metavar="[MORE_SCRIPTS...] [-- SBATCH_ARGS...]")
# --intent is any word here: another than prod or debug is refused by the check the Python API makes too.
@click.option("--intent", default="prod", metavar="prod|debug", help="debug starts on debug_qos.")
@click.option("--pin", metavar="LANE", help="Stay on one lane: 'fellows' (first rung only) or a command lane.")
@click.option("--detach", is_flag=True, help="Print the dispatch id and return; `watch` drives it.")
@click.option("--follow", is_flag=True, help="With --pin fellows: stay in the foreground until the job runs.")
@click.option("--wait", "to_end", is_flag=True, help="Block until the job ends; exit as `fellows-fsm wait` does.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the live view goes to stderr).")
# --gpus is any int here: a count below 0 is refused by check_spec, the one check the Python API makes too.
@click.option("--gpus", type=int, metavar="N", help="GPUs (default: the script's #SBATCH --gres=gpu:N).")
@click.option("--time", "time_limit", metavar="LIMIT", help="Wall time, e.g. 4:00:00 (default: #SBATCH --time).")
@click.option("--name", help="Job name (default: #SBATCH --job-name, else the script's name).")
@click.option("--wrap", metavar="CMD", help="Run CMD as the job instead of a SCRIPT (sbatch's --wrap: one sh line).")
@config_option
@click.pass_context
def submit(  # noqa: PLR0915, PLR0917 - click passes every option as an argument; several scripts: ui/many.py
    ctx: click.Context,
    script: Path | None,
    sbatch_args: tuple[str, ...],
    intent: str,
    pin: str | None,
    detach: bool,
    follow: bool,
    to_end: bool,
    as_json: bool,
    gpus: int | None,
    time_limit: str | None,
    name: str | None,
    wrap: str | None,
) -> None:
    """Dispatch an sbatch SCRIPT (or --wrap "CMD") and follow it until it runs or reaches GCP.

    Options after `--` go to sbatch unchanged, except those fellows-fsm sets itself (--qos, --comment,
    --deadline, --job-name, --gres, --gpus, --time, ...), which are refused. Before anything is queued the
    ladder is checked against what the cluster grants. The journal's background driver walks the dispatch
    (started here if none runs): this command only follows it, so Ctrl-C, a closed terminal or a dropped ssh
    session never stops the walk. `--detach` returns once the first job is queued; `--pin fellows` too (add
    --follow to stay). Several scripts make one dispatch each (journaled together): their ids are printed one a
    line (--json: a list, once every job is queued) and the command returns once every first job is queued.
    """
    script, sbatch_args, name = wrapped(script, sbatch_args, wrap, name, lambda: config_of(ctx).state_dir)
    scripts, sbatch_args = split_scripts(script, sbatch_args)
    if len(scripts) > 1:  # ui/many.py
        submit_scripts(
            config_of(ctx),
            scripts,
            sbatch_args,
            intent=intent,
            pin=pin,
            as_json=as_json,
            gpus=gpus,
            time_limit=time_limit,
            name=name,
        )
        return
    [spec] = script_specs(scripts, sbatch_args, gpus, time_limit, name)  # Fellows.check makes the same check again
    config = config_of(ctx)
    with open_fellows(config) as fellows:
        # Before anything is journaled: the ladder against what the cluster grants (refusals raise here).
        checked = fellows.check(spec, intent=intent, pin=pin)
        for line in checked.warnings:
            click.echo(f"fellows-fsm: warning: {line}", err=True)
        if checked.refused is not None:
            raise checked.refused
        for line in checked.notes:
            click.echo(f"fellows-fsm: note: {line}", err=True)
        dispatch_id, ended = "", list[str | None]() if to_end else None
        journal = fellows.journal
        queued_only = pin is not None and not hands_off(config, pin) and not follow
        try:
            with naming_the_journaled(fellows):  # an error after the row names it: never submit it twice
                submitted = fellows.submit(spec, intent=intent, pin=pin, check=checked)
                dispatch_id = submitted.dispatch_id
                say_who_drives(fellows, dispatch_id, submitted.budget)
                if hands_off(config, pin):
                    if detach:  # a pinned lane's handoff IS the submit: its result is the answer, not the job's end
                        fellows.follow(dispatch_id, until=lambda _: handed_or_waiting(fellows, dispatch_id))
                    else:
                        follow_live(fellows, dispatch_id, make_console(stderr=as_json, quiet=quiet(as_json)))
                elif detach or queued_only:
                    wait_until_queued(fellows, dispatch_id)
                else:
                    wait_until_queued(fellows, dispatch_id)  # a refusal, or a SLURM that never answers, said at once
                    # With --json the live view goes to stderr, and only when that is a terminal.
                    follow_live(fellows, dispatch_id, make_console(stderr=as_json, quiet=quiet(as_json)))
                if ended is not None:  # submit --wait: to the job's end (ui/wait.py)
                    ended = _wait_command.wait_all(fellows, [dispatch_id], None)
        except KeyboardInterrupt:
            dispatch_id = dispatch_id or fellows.enqueued or ""
            if not dispatch_id:
                raise Interrupted("interrupted before the dispatch was journaled: nothing was queued") from None
            click.echo(
                f"detached: dispatch {dispatch_id} goes on, walked by the background driver; "
                f"`fellows-fsm watch` follows it, `fellows-fsm cancel {dispatch_id}` withdraws it",
                err=True,
            )
            ctx.exit(INTERRUPTED)
        row = journal.dispatch(dispatch_id)
        assert row is not None  # journaled before anything was submitted
        if as_json:
            echo_json(dispatch_object(journal, row))
        elif detach:
            click.echo(row.id)  # always the id alone, so `id=$(fellows-fsm submit --detach ...)` works
        elif queued_only and not row.final:
            click.echo(
                f"dispatch {row.id} is queued on {row.qos} as SLURM job {row.job_id or '-'} (pinned: it stays "
                f"there); `fellows-fsm watch` follows it, `fellows-fsm cancel {row.id}` withdraws it"
            )
        else:
            click.echo(summary(row.id, journal))
        error = outcome_error(journal, row.id)
    _wait_command.finish(ctx, ended, error)  # the error, if any; with --wait, wait's exit code (ui/wait.py)


# --------------------------------------------------------------------------- watch
@main.command(short_help="Drive every live dispatch to the end.")
@click.option("--once", is_flag=True, help="Poll once, print where every dispatch stands, and return.")
@click.option("--json", "as_json", is_flag=True, help="Print the driven dispatches as a JSON list at the end.")
@config_option
@click.pass_context
def watch(ctx: click.Context, once: bool, as_json: bool) -> None:
    """Follow every live dispatch in the journal until each is final; the background driver walks them (started
    here if none runs), so stopping watch stops nothing.

    With --once it takes one poll itself when no driver runs (the fallback where login nodes kill long-lived
    processes: run it from cron, with poll_interval_seconds set to the cron period), and shows where every
    dispatch stands.
    """
    config = config_of(ctx)
    # What was live when watch was asked for is followed, even what the driver it starts ends before it looks.
    asked_at = SystemClock().now()
    with open_fellows(config, background=not once) as fellows:
        journal = fellows.journal
        driving = fellows.drive()
        router = fellows.router
        ids = router.driven if router is not None else [r.id for r in journal.dispatches(live_only=True)]
        if not once:
            ids = list(dict.fromkeys([*(r.id for r in journal.final_since(asked_at)), *ids]))
        if not ids:
            if as_json:
                echo_json([])
            else:
                click.echo(none_in(config, live=True))
            return
        console = make_console(stderr=as_json, quiet=quiet(as_json))
        next_lane = next_lane_of(config)
        for line in _created_with(config, journal, ids):
            click.echo(f"fellows-fsm: {line}", err=True)
        if once and not driving:
            click.echo(f"fellows-fsm: note: {journal.path} is driven by another router ({fellows.driver})", err=True)
        if once:
            report = fellows.poll() if driving else None
            for failure in report.failures if report is not None else ():
                click.echo(f"fellows-fsm: {failure}", err=True)
            if report is not None and report.unreachable:
                raise SchedulerUnreachable("SLURM did not answer this poll; the dispatches are unchanged")
        else:
            console.print(config_header(where_config(config), sep="\n"), style="dim", highlight=False)
            state = LiveState()
            try:
                handles = live(
                    console,
                    lambda: watch_view(fellows, state, next_lane),
                    state,
                    lambda on_tick, sleep: fellows.watch(on_tick=on_tick, sleep=sleep),
                )
            except KeyboardInterrupt:
                click.echo("stopped following: the background driver walks the dispatches on", err=True)
                ctx.exit(INTERRUPTED)
            ids = list(dict.fromkeys([*ids, *(h.dispatch_id for h in handles)]))
        rows = [row for i in ids if (row := journal.dispatch(i)) is not None]
        _print_rows(journal, rows, as_json=as_json, console=console, where=where_config(config))
        errors = [e for i in ids if (e := outcome_error(journal, i)) is not None]
    for extra in errors[1:]:
        click.echo(f"fellows-fsm: error: {extra}", err=True)
    if errors:
        raise errors[0]


# --------------------------------------------------------------------------- status, history
_RECENT = RECENT
"""How many of the most recent dispatches `status` shows besides the live ones, unless --all or --last."""


@main.command(short_help="Where the live and recent dispatches stand.")
@click.argument("dispatch_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of dispatches.")
@click.option("--live", "live_only", is_flag=True, help="Only dispatches that are not final yet.")
@click.option("--all", "show_all", is_flag=True, help="Every dispatch in the journal, however many.")
@click.option(
    "--last", type=click.IntRange(min=0), default=_RECENT, show_default=True, metavar="N", help="Recent ones shown."
)
@click.option("--team", is_flag=True, help="The live dispatches of the whole [ledger] team, every machine's.")
@config_option
@click.pass_context
def status(  # noqa: PLR0917 - click passes every option as an argument
    ctx: click.Context, dispatch_id: str | None, as_json: bool, live_only: bool, show_all: bool, last: int, team: bool
) -> None:
    """Where the live dispatches and the N most recent ones stand (or DISPATCH_ID, or --all of them).

    It only reads the journal, so it is safe while a router drives it. --team reads the shared [ledger] instead.
    """
    config = config_of(ctx)
    if team:
        ledger, live = read_team(config)
        if as_json:
            echo_json(team_json(ledger, live))
        else:
            make_console().print(team_table(ledger, live))
        return
    with open_journal(config, readonly=True) as journal:  # read-only use: never the driver lock
        _start_driver_for_reader(config, journal)
        total = journal.count()
        if show_all and not dispatch_id and not as_json:
            # --all may list tens of thousands: read only the table's columns, parse no row's JSON.
            listed = journal.listings(live_only=live_only)
            if listed:
                # One query for every paid run; the steps only of a dispatch the budget keeps waiting.
                states = {r.dispatch_id: r.label for r in listed}
                paid = {
                    run.dispatch_id: run
                    for run in journal.paid_runs()
                    if run.dispatch_id in states and shows_paid(run, states[run.dispatch_id])
                }
                budget = {
                    r.dispatch_id: why
                    for r in listed
                    if waits_for_budget(r.outcome) and (why := budget_reason(journal.steps(r.dispatch_id)))
                }
                updated = {r.dispatch_id: r.updated_at for r in listed}
                make_console().print(config_header(where_config(config), sep="\n"), style="dim", highlight=False)
                make_console().print(status_table(listed, updated=updated, paid=paid, budget=budget))
            else:
                click.echo(none_in(config, live=live_only))
            return
        try:
            rows = select(journal, dispatch_id, live_only=live_only, last=None if show_all else last)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from None
        if not rows and not as_json:
            click.echo(none_in(config, live=live_only))
            return
        console = make_console()
        _print_rows(journal, rows, as_json=as_json, console=console, where=where_config(config))
        if as_json:
            return
        if not dispatch_id and not show_all and len(rows) < total:
            which = "the live ones" if live_only else f"the live ones and the {last} most recent"
            console.print(f"{len(rows)} of {total:,} dispatches shown ({which}); --all shows every one", style="dim")


def _print_rows(
    journal: Journal,
    rows: Sequence[DispatchRow],
    *,
    as_json: bool,
    console: Console,
    where: Mapping[str, str] | None = None,
) -> None:
    """The dispatches as status shows them (the table, or a JSON list), each with its paid run and its budget
    reason when it has one; ``where`` (the config and journal in use) heads the table and is in each JSON object."""
    now = time.time()
    handoffs = {r.id: journal.handoff(r.id) for r in rows}
    facts = {r.id: paid_facts(journal, r, handoffs[r.id]) for r in rows}
    ends = journal.ends([r.id for r in rows])
    if as_json:
        echo_json(
            [
                {
                    **dispatch_json(
                        r, handoffs[r.id], paid=facts[r.id][0], budget=facts[r.id][1], now=now, end=ends.get(r.id)
                    ),
                    **(where or {}),
                }
                for r in rows
            ]
        )
        return
    if where is not None:
        console.print(config_header(where, sep="\n"), style="dim", highlight=False)
    snaps = [Snapshot.of_row(r, handoffs[r.id], paid=facts[r.id][0], budget=facts[r.id][1]) for r in rows]
    paid = {i: run for i, (run, _) in facts.items() if run is not None}
    budget = {i: why for i, (_, why) in facts.items() if why is not None}
    ended = {i: _wait_command.end_words(e) for i, e in ends.items()}  # how each ended (ui/wait.py)
    updated = {r.id: r.updated_at for r in rows}
    console.print(status_table(snaps, updated=updated, paid=paid, budget=budget, now=now, ended=ended))


@main.command(short_help="Every transition of one dispatch.")
@click.argument("dispatch_id")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of transitions.")
@config_option
@click.pass_context
def history(ctx: click.Context, dispatch_id: str, as_json: bool) -> None:
    """Every transition of DISPATCH_ID: time, from, to, trigger, QoS, SLURM job and pending reason."""
    config = config_of(ctx)
    with open_journal(config, readonly=True) as journal:
        _start_driver_for_reader(config, journal)
        row = find_row(journal, dispatch_id)
        entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
        paid = journal.paid_run(row.id)
    if as_json:
        echo_json([e.as_json() for e in entries])
    else:
        make_console().print(history_table(row, entries, paid=paid))


def _start_driver_for_reader(config: Config, journal: Journal) -> None:
    """status and history start the driver when they find live work and none; a driver that cannot start is a
    warning there, never a failure of the read."""
    try:
        say_started(app.start_driver(config, journal), config)  # looked up at call time: the test seam
    except FellowsError as exc:
        click.echo(f"fellows-fsm: warning: {exc}", err=True)
    _driver_commands.warn_env_problem(journal)  # a driver that cannot run SLURM's commands says so, in one line


def _created_with(config: Config, journal: Journal, ids: Sequence[str]) -> list[str]:
    """One line per group of live dispatches created with another config than this watch's: they finish with
    the ladder, caps and fallback lane they were created with (journaled), not with this config's."""
    mine = config.source
    others: dict[str, list[str]] = {}
    for dispatch_id in ids:
        row = journal.dispatch(dispatch_id)
        source = row.settings.get("config") if row is not None else None
        if source is not None and source != mine:
            others.setdefault(str(source), []).append(dispatch_id)
    return [
        f"{len(found)} dispatch(es) ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}) were created with "
        f"{source}; they finish with the ladder, caps and fallback lane journaled then"
        for source, found in others.items()
    ]


# --------------------------------------------------------------------------- cancel
@main.command(short_help="Withdraw a dispatch and scancel its job.")
@click.argument("dispatch_id")
@config_option
@click.pass_context
def cancel(ctx: click.Context, dispatch_id: str) -> None:
    """Withdraw DISPATCH_ID: scancel its SLURM jobs whatever their state, and mark it final (withdrawn).

    The journal's driver does it (the background driver, started if none runs), so it is never resubmitted.
    """
    config = config_of(ctx)
    with open_fellows(config) as fellows:
        try:
            before = find_row(fellows.journal, dispatch_id)
            job_ids = fellows.cancel(dispatch_id)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from None
        row = find_row(fellows.journal, dispatch_id)
        run = fellows.journal.paid_run(row.id)
        waits = scancel_waits(fellows.journal, row.id)
    if waits is not None:  # withdrawn, journaled; scancel waits for a driver that can run it
        jobs = f"its SLURM job(s) {', '.join(job_ids)} are" if job_ids else "any job of it is"
        click.echo(
            f"dispatch {row.id} withdrawn: {jobs} cancelled at the driver's first poll that can run scancel ({waits})"
        )
    elif run is not None and f"fsm-{row.id}@{run.lane}" in job_ids:
        click.echo(f"dispatch {row.id} withdrawn: its paid job on lane {run.lane} deleted (fsm-{row.id})")
    elif job_ids:  # only the jobs this cancel ended, never those a park or an earlier cancel ended
        click.echo(f"dispatch {row.id} withdrawn (SLURM jobs cancelled: {', '.join(job_ids)})")
    else:
        already = "was withdrawn already" if before.outcome == Outcome.WITHDRAWN else "withdrawn"
        click.echo(f"dispatch {row.id} {already}: no job of it was pending or running")
