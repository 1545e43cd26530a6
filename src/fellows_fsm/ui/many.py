"""``fellows-fsm submit a.sbatch b.sbatch ...``: one dispatch per script, journaled in one transaction.

The ids are printed (one a line) as soon as they are journaled: each is walked by the background driver from then
on, whatever becomes of this command. It then waits until every first job is queued (or refused), reading the
journal in one query a round, and starting the driver again if it stopped (so a killed driver loses none).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

import click

from fellows_fsm.config.file import Config
from fellows_fsm.errors import FellowsError, SchedulerUnreachable
from fellows_fsm.journal.queries import outcome_error
from fellows_fsm.journal.snapshot import dispatch_json, paid_facts
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.scheduler.script import time_seconds
from fellows_fsm.ui.app import echo_json, open_fellows

__all__ = ["script_specs", "split_scripts", "submit_scripts"]

QUEUED_WAIT_SECONDS = 30.0
"""How long the command waits with no job of the journal queued meanwhile before it says SLURM has not queued
them (a burst from several shells is queued at the driver's pace: each job queued restarts the wait)."""
READ_SECONDS = 1.0
"""How often it reads the journal while it waits (one query, every live row: several such commands at once must
leave the driver the CPU); the driver is asked to run at each read."""


def split_scripts(first: Path, rest: Sequence[str]) -> tuple[list[Path], tuple[str, ...]]:
    """The scripts (``first`` and the words after it up to the first option) and the sbatch options after them."""
    scripts = [first]
    for i, word in enumerate(rest):
        if word.startswith("-"):
            return scripts, tuple(rest[i:])
        scripts.append(Path(word))
    return scripts, ()


def script_specs(
    scripts: Sequence[Path], sbatch_args: tuple[str, ...], gpus: int | None, time_limit: str | None, name: str | None
) -> list[JobSpec]:
    """One checked spec per script, read as `submit` reads one (its #SBATCH lines; the flags win); UsageError for a
    bad one, before the state dir is opened: nothing is journaled for it."""
    limit = time_seconds(time_limit, "--time") if time_limit is not None else None
    specs = []
    for script in scripts:  # every script checked before the state dir is opened: nothing journaled for a bad one
        specs.append(
            JobSpec.from_script(script, name=name or None, gpus=gpus, time_limit_seconds=limit, extra_args=sbatch_args)
        )
    return specs


def submit_scripts(
    config: Config,
    scripts: Sequence[Path],
    sbatch_args: tuple[str, ...],
    *,
    intent: str,
    pin: str | None,
    as_json: bool,
    gpus: int | None,
    time_limit: str | None,
    name: str | None,
) -> None:
    """Journal one dispatch per script (all or none), print their ids, wait until each first job is queued."""
    specs = script_specs(scripts, sbatch_args, gpus, time_limit, name)
    with open_fellows(config) as fellows:
        handles = fellows.submit_many(specs, intent=intent, pin=pin)
        ids = [h.dispatch_id for h in handles]
        if not as_json:
            click.echo("\n".join(ids))  # journaled: each is walked from here on, whatever becomes of this command
        journal = fellows.journal
        end = time.monotonic() + QUEUED_WAIT_SECONDS
        asked, before = 0.0, set[str]()
        waiting = set(ids)
        while waiting:
            live = {r.id: r for r in journal.dispatches(live_only=True)}
            waiting = {i for i in waiting if i in live and live[i].job_id is None and not live[i].pinned}
            if not waiting:
                break
            unqueued = {i for i, r in live.items() if r.job_id is None}  # other commands' dispatches may go first
            if before - unqueued:
                end = time.monotonic() + QUEUED_WAIT_SECONDS  # the driver is queueing: wait on
            before = unqueued
            if time.monotonic() > end:
                raise SchedulerUnreachable(
                    f"{len(waiting)} of the {len(ids)} dispatches have no job queued yet; they stay journaled and "
                    "the background driver keeps trying (never twice); `fellows-fsm status` shows them"
                )
            if time.monotonic() - asked >= READ_SECONDS:
                # A driver that died is started again (the journal has every dispatch); one slow to start (a loaded
                # machine) is found running at a later round: until the deadline, that is no failure.
                with contextlib.suppress(FellowsError):
                    fellows.ensure_driver()
                asked = time.monotonic()
            time.sleep(READ_SECONDS)
        if as_json:
            objects = []
            for row in (r for r in (journal.dispatch(i) for i in ids) if r is not None):
                handoff = journal.handoff(row.id)
                paid, budget = paid_facts(journal, row, handoff)
                objects.append(dispatch_json(row, handoff, paid=paid, budget=budget))
            echo_json(objects)
        errors = [e for e in (outcome_error(journal, i) for i in ids) if e is not None]
    for error in errors[1:]:
        click.echo(f"fellows-fsm: error: {error}", err=True)
    if errors:
        raise errors[0]
