"""``fellows-fsm driver``: who walks the journal's dispatches (status), stopping it (stop), and its log (log)."""

from __future__ import annotations

import click

from fellows_fsm.clock import iso_utc
from fellows_fsm.driver import process as daemon
from fellows_fsm.driver.environment import env_problem_line
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui.app import config_of, config_option, echo_json, main

__all__ = ["driver", "warn_env_problem"]


@main.group(short_help="The background driver that walks every dispatch: status, stop, log.")
def driver() -> None:
    """The journal's background driver: one process per journal, started by any command that finds live
    dispatches and no driver, gone once nothing is live for [router] driver_idle_seconds."""


@driver.command("status", short_help="Which process drives the journal.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@config_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Which process drives the journal (pid, host, since when, its last tick, live dispatches, log)."""
    config = config_of(ctx)
    found = daemon.status(config)
    owner = found.owner if found.running else None
    if as_json:
        echo_json(
            {
                "running": found.running,
                "pid": owner.pid if owner else None,
                "host": owner.host if owner else None,
                "kind": owner.kind if owner else None,
                "since": iso_utc(owner.since) if owner else None,
                "last_tick": iso_utc(owner.last_tick) if owner and owner.last_tick else None,
                "live": found.live,
                "journal": str(found.journal),
                "log": str(found.log),
                "wake": found.wake,
                "env_problem": found.env,
                "undeliverable": dict(found.undeliverable),
            }
        )
        return
    for sink, n in sorted(found.undeliverable.items()):
        click.echo(f"notify: {n} event(s) undeliverable at sink {sink!r}; `fellows-fsm notify log` shows them")
    if owner is None:
        click.echo(f"no driver for {found.journal} ({found.live} live dispatch(es)); log {found.log}")
        return
    tick = iso_utc(owner.last_tick) if owner.last_tick else "none yet"
    click.echo(
        f"driver {owner.describe()} ({owner.kind}) since {iso_utc(owner.since)}, last tick {tick}; "
        f"{found.live} live dispatch(es) in {found.journal}; log {owner.log or found.log}"
    )
    if found.wake is not None:
        poll = config.fellows.poll_interval_seconds
        click.echo(f"wake-up: {found.wake}; the driver reads new messages at its next poll (every {poll:g} s)")
    if found.env is not None:
        click.echo(f"environment: {found.env}")


def warn_env_problem(journal: Journal) -> None:
    """``status`` and ``history``: one line on stderr when the journal's driver cannot run SLURM's commands."""
    line = env_problem_line(journal)
    if line is not None:
        click.echo(f"fellows-fsm: warning: {line}", err=True)


@driver.command("stop", short_help="Stop the driver (the dispatches stay journaled).")
@config_option
@click.pass_context
def stop(ctx: click.Context) -> None:
    """Stop the driver: it finishes the tick in hand and releases the journal. Live dispatches stay journaled,
    their windows wait, and the next fellows-fsm command starts a new driver."""
    config = config_of(ctx)
    owner = daemon.stop(config)
    if owner is None:
        click.echo(f"no driver for {config.journal_path}")
    else:
        click.echo(f"stopped the driver {owner.describe()}; live dispatches stay journaled")


@driver.command("log", short_help="The last lines of the driver's log.")
@click.option("-n", "lines", type=click.IntRange(min=1), default=40, show_default=True, help="How many lines.")
@config_option
@click.pass_context
def log(ctx: click.Context, lines: int) -> None:
    """The last lines of the background driver's log (in the state dir; rotated past 1 MB)."""
    config = config_of(ctx)
    path = daemon.log_path(config.journal_path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        click.echo(f"no driver log yet at {path}")
        return
    for line in text.splitlines()[-lines:]:
        click.echo(line)
