"""The steps of ``fellows-fsm submit`` around the submit itself (cli.py): naming a journaled dispatch when an error
stops the command, its JSON object, who drives it, and the wait until its first job is queued."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

import click

from fellows_fsm.api import Fellows
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import State
from fellows_fsm.driver.environment import judged_problem
from fellows_fsm.driver.inbox import DRIVER_CONFIG
from fellows_fsm.errors import FellowsError, JournalFull, SchedulerUnreachable
from fellows_fsm.journal.queries import journaled_failure
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.snapshot import dispatch_json, paid_facts
from fellows_fsm.journal.store import Journal

__all__ = [
    "DETACH_WAIT_SECONDS",
    "dispatch_object",
    "handed_or_waiting",
    "hands_off",
    "naming_the_journaled",
    "quiet",
    "say_who_drives",
    "wait_until_queued",
]


@contextlib.contextmanager
def naming_the_journaled(fellows: Fellows) -> Iterator[None]:
    """An error that stops ``submit`` once its dispatch is journaled names the dispatch, and says when its paid job
    exists (or is being made) and never to submit it again (journal/queries.py: ``journaled_failure``)."""
    try:
        yield
    except FellowsError as exc:
        dispatch_id = fellows.enqueued
        if dispatch_id is None or (dispatch_id in str(exc) and not isinstance(exc, JournalFull)):
            raise  # before the row, or said of the dispatch already (SLURM has not queued it yet, ...)
        journaled = journaled_failure(fellows.journal, dispatch_id, exc)
        if journaled is None:
            raise
        raise journaled from None


def dispatch_object(journal: Journal, row: DispatchRow) -> dict[str, object]:
    """One dispatch's JSON object, with its paid run and budget reason when it has them."""
    handoff = journal.handoff(row.id)
    paid, budget = paid_facts(journal, row, handoff)
    return dispatch_json(row, handoff, paid=paid, budget=budget, end=journal.ends([row.id]).get(row.id))


def handed_or_waiting(fellows: Fellows, dispatch_id: str) -> bool:
    """Has a pinned lane's handoff happened (or ended), or does it wait for the [budget] (said by status)?"""
    return fellows.handle(dispatch_id).state != State.HANDING_OFF or fellows.budget_reason(dispatch_id) is not None


def hands_off(config: Config, pin: str | None) -> bool:
    """True if ``pin`` names a lane a job is handed to (its command is the submit), not the ladder."""
    return pin is not None and config.route(pin).hands_off


def say_who_drives(fellows: Fellows, dispatch_id: str, budget: str | None) -> None:
    """One note when a program of its own (not the background driver) drives the journal this submit enqueued in;
    one for what the submit did to the driver's [budget], if anything."""
    if budget is not None:
        click.echo(f"fellows-fsm: note: {budget}", err=True)
    journal = fellows.journal
    owner = journal.owner() if fellows.started is None else None  # a driver started here is said by open_fellows
    if owner is not None and owner.kind != "background" and journal.driver_alive():
        click.echo(
            f"fellows-fsm: note: {journal.path} is driven by another router ({owner.describe()}): it walks "
            f"dispatch {dispatch_id}; following it from here",
            err=True,
        )


DETACH_WAIT_SECONDS = 30.0
"""How long ``submit --detach`` waits for the driver to queue the first job (or SLURM to refuse it)."""


def quiet(as_json: bool) -> bool:
    return as_json and not sys.stderr.isatty()


def wait_until_queued(fellows: Fellows, dispatch_id: str) -> None:
    """Follow until the dispatch's first job is queued (or it is final): a refusal is still an exit code.

    SchedulerUnreachable (exit 6) if SLURM has not queued it within ``DETACH_WAIT_SECONDS``: it stays journaled,
    and the driver goes on asking (looking its token up first, so it is never queued twice)."""
    end = time.monotonic() + DETACH_WAIT_SECONDS

    def queued(_: object) -> bool:
        handle = fellows.handle(dispatch_id)
        if handle.slurm_job_id is not None or handle.final:
            return True
        if (why := judged_problem(fellows.journal, DRIVER_CONFIG)) is not None:  # said at once, not after 30 s
            raise SchedulerUnreachable(f"dispatch {dispatch_id} stays journaled, not queued yet: {why}")
        if time.monotonic() > end:
            raise SchedulerUnreachable(
                f"SLURM has not queued dispatch {dispatch_id}'s job within {DETACH_WAIT_SECONDS:g} s; it stays "
                "journaled and the background driver keeps trying (never twice); `fellows-fsm watch` follows it"
            )
        return False

    # Read the journal often: the driver woke for this dispatch, its job is queued well before the next poll.
    fellows.follow(dispatch_id, until=queued, read_every=min(0.1, fellows.config.fellows.poll_interval_seconds))
