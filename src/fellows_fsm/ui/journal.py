"""``fellows-fsm journal compact`` and ``fellows-fsm journal check``: the archive of finished dispatches moved on
demand, and the full check of the journal and its archive (journal/archive.py, journal/check.py)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import click

from fellows_fsm.clock import iso_utc
from fellows_fsm.config.journal import keep_days_value
from fellows_fsm.errors import ConfigError, JournalError
from fellows_fsm.journal.archive import archive_path, compact
from fellows_fsm.journal.check import check_path, clear_check_due
from fellows_fsm.journal.file import damaged
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui.app import config_of, config_option, echo_json, main

__all__ = ["journal_check", "journal_compact", "journal_group"]


@main.group("journal")
def journal_group() -> None:
    """The journal's upkeep: move finished dispatches to the archive, check every page."""


def _keep_days(_ctx: click.Context, _param: click.Parameter, value: float | None) -> float | None:
    if value is None:
        return None
    try:
        return keep_days_value("--keep-days", value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


@journal_group.command("compact", short_help="Move finished dispatches older than keep_days to the archive.")
@click.option(
    "--keep-days",
    type=float,
    callback=_keep_days,
    metavar="DAYS",
    help="Keep the dispatches that ended within DAYS in the journal (default: [journal] keep_days).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@config_option
@click.pass_context
def journal_compact(ctx: click.Context, keep_days: float | None, as_json: bool) -> None:
    """Move every dispatch that ended more than keep_days ago (and has no paid job that may still spend) to the
    archive beside the journal, where history, status --all and spend still read it. Safe while a driver runs
    and while others read: a move is a copy, then a delete, one batch at a time."""
    config = config_of(ctx)
    path = config.journal_path
    days = config.journal.keep_days if keep_days is None else keep_days
    now = time.time()
    before = now - days * 86_400.0
    if not path.exists():
        done_json: dict[str, Any] = {"journal": str(path), "moved": 0, "left": 0, "archive": None}
        echo_json(done_json) if as_json else click.echo(f"no journal at {path}: nothing to move")
        return
    Journal(path, allow_network_fs=config.allow_network_state_dir).close()  # upgraded (its indexes) and checked
    done = compact(path, before=before, now=now)
    assert done is not None  # it waits for another move to end
    if as_json:
        echo_json(
            {
                "journal": str(path),
                "archive": str(done.archive),
                "keep_days": days,
                "ended_before": iso_utc(before),
                "moved": done.moved,
                "left": done.left,
                "seconds": round(done.seconds, 3),
            }
        )
        return
    click.echo(
        f"moved {done.moved:,} dispatches that ended before {iso_utc(before)} to {done.archive} "
        f"in {done.seconds:.1f} s; the journal keeps the live ones and those of the last {days:g} days"
    )


@journal_group.command("check", short_help="Read every page and row of the journal and its archive.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@config_option
@click.pass_context
def journal_check(ctx: click.Context, as_json: bool) -> None:
    """Read every page and every row of the journal and of its archive (what opening the journal to write does
    only after a full disk or a driver that did not end cleanly). Exit 0 when both read whole; exit 7 with one
    line naming the damaged file otherwise."""
    config = config_of(ctx)
    path = config.journal_path
    if not path.exists():
        raise JournalError(f"no journal at {path}: nothing to check (state_dir is {config.state_dir})")
    with contextlib.closing(Journal(path, readonly=True)) as journal:
        journal.check_all()
        archive = archive_path(path)
        archived = journal.archived()  # attached: its dispatches counted below
        if archived:
            try:
                check_path(archive)
            except Exception as exc:
                raise damaged(archive, exc) from None
        total = journal.count()
        both = 0
        if archived:
            both = journal.halfway(exact=True)
    clear_check_due(path)
    if as_json:
        echo_json(
            {
                "journal": str(path),
                "archive": str(archive) if archived else None,
                "ok": True,
                "dispatches": total,
                "moved_halfway": both,
            }
        )
        return
    where = f" and its archive {archive}" if archived else ""
    halfway = f"; {both} dispatches are in both (a move cut short: the next compact ends it)" if both else ""
    click.echo(f"journal {path}{where}: every page and row read, {total:,} dispatches{halfway}")
