"""Taking a dispatch back: a user's cancel (delivered by the inbox, or asked directly), the cleanup of a Ctrl-C
while a first job was being queued, and the late job such a Ctrl-C may have left.

Each is a row of the table (recall, interrupt: lifecycle.py), fired on the dispatch and run by the executor, which
journals WITHDRAWN first and then scancels; this finds the dispatch and its jobs. It takes the roster, the executor,
the journal, the scheduler and the clock, never the router.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time

import attrs

from fellows_fsm.clock import Clock
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ladder import dispatch_token
from fellows_fsm.core.vocab import LADDER_LANE, PAID_LIVE_STATES, Outcome, State
from fellows_fsm.driver.clusters import Clusters
from fellows_fsm.driver.executor import Executor
from fellows_fsm.driver.inbox import CancelLater, ScancelLater
from fellows_fsm.driver.roster import Roster
from fellows_fsm.errors import (
    ConfigError,
    FellowsError,
    Interrupted,
    PaidLaneError,
    SchedulerError,
    SchedulerUnreachable,
    SlurmCommandMissing,
)
from fellows_fsm.journal.queries import pending_delete, refuse_handed_off, restore
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import PaidLane
from fellows_fsm.scheduler.port import Phase

__all__ = ["INTERRUPT_LOOKUPS", "Withdrawal"]

log = logging.getLogger(__name__)

INTERRUPT_LOOKUPS = 4
"""How many times (a second apart) an interrupted submit's token is looked up before it is taken as never queued."""


@attrs.frozen
class Withdrawal:
    """Takes dispatches of one driver back (its roster), through its executor."""

    roster: Roster
    executor: Executor
    journal: Journal
    scheduler: Clusters
    """Every SLURM lane's port (a dispatch may have jobs on several clusters)."""
    clock: Clock

    def interrupted(self, d: Dispatch) -> Interrupted:
        """Ctrl-C while ``d`` was being queued: cancel whatever reached the cluster and withdraw it.

        The cleanup itself ignores further Ctrl-C. If SLURM cannot be asked (it does not answer), the
        dispatch is left live for `watch` (which looks its token up first, so never twice) and says so.
        """
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            if self.journal.dispatch(d.id) is None:
                return Interrupted("interrupted before anything was journaled or queued; nothing to undo")
            try:
                job_id = d.job_id
                if job_id is None:
                    job_id = self.settled_lookup(d)
                self.executor.interrupt(d, job_id)  # journaled WITHDRAWN first, then its job (if any) scancelled
            except SchedulerError as exc:
                return Interrupted(
                    f"interrupted while dispatch {d.id} was being queued, and SLURM did not answer ({exc}); it is "
                    f"left to `fellows-fsm watch` (never queued twice) or `fellows-fsm cancel {d.id}`"
                )
            self.roster.ended(d.id)
            queued = f"its job {job_id} cancelled" if job_id is not None else "nothing was queued"
            return Interrupted(f"interrupted: dispatch {d.id} withdrawn ({queued})")
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def settled_lookup(self, d: Dispatch) -> str | None:
        """The job an interrupted sbatch may have created, looked up by token a few times: a controller that was
        slow to answer can still be working through the request when the first look comes."""
        for attempt in range(INTERRUPT_LOOKUPS):
            if attempt:
                time.sleep(1.0)
            found = self.scheduler.find_by_token(d.token(), d.rung.lane)
            if found is not None:
                return found.job_id
        return None

    def sweep_interrupted(self) -> None:
        """Cancel any job that a recently interrupted submit created after it was withdrawn (looked up once)."""
        for row in self.journal.ended_since(Outcome.WITHDRAWN_INTERRUPTED, self.clock.now() - 3600):
            try:
                found = self.scheduler.find_by_token(dispatch_token(row.id, 0))
                if found is not None and found.phase is not Phase.GONE:
                    log.warning(
                        "dispatch %s was withdrawn, yet job %s carries its token: cancelling", row.id, found.job_id
                    )
                    self.executor.cancel_strays([found.job_id])
            except SchedulerError as exc:
                log.warning("could not look for a late job of withdrawn dispatch %s: %s", row.id, exc)

    def withdraw(self, dispatch_id: str) -> list[str]:
        """Withdraw a dispatch (a user's ``cancel``): journal it final (``withdrawn``) first, then scancel every
        job it got, whatever its state; return the ids of those that were live (pending or running: the jobs this
        cancel ends, not those a park or an earlier cancel ended). It is never advanced again.

        A dispatch handed to a command lane cannot be taken back (FellowsError): cancel it in that lane. A cluster
        of its jobs that cannot be asked leaves it as it was (SchedulerUnreachable, exit 6: the line says so).
        """
        journal, scheduler = self.journal, self.scheduler
        row = journal.dispatch(dispatch_id)
        if row is None:
            raise ConfigError(f"dispatch {dispatch_id!r} is not in the journal {journal.path}")
        if row.state == State.ENDED:  # its job ended (the end's rows: core/ends.py): nothing is left to cancel
            raise FellowsError(f"dispatch {row.id} has ended ({row.outcome}): there is nothing left to cancel")
        if row.state in PAID_LIVE_STATES:
            return self._withdraw_paid(row.id)
        if row.state == State.HANDING_OFF:
            context = self.roster.handoffs.context.get(row.id)
            if context is not None and isinstance(context[0], PaidLane) and context[0].follows:
                raise CancelLater(row.id)
        refuse_handed_off(journal, row)
        job_ids = list(dict.fromkeys([*(j.job_id for j in journal.jobs(row.id)), *filter(None, [row.job_id])]))
        # A controller that restarted on stale state may have given one of these ids to someone else's job:
        # cancel only what still carries this dispatch's token (or what squeue no longer knows at all).
        prefix = dispatch_token(row.id, 0)[:-1]
        try:
            seen = scheduler.observe(job_ids) if job_ids else {}
            job_ids = [
                j for j in job_ids if (obs := seen.get(j)) is None or obs.token is None or obs.token.startswith(prefix)
            ]
            live = [j for j in job_ids if (obs := seen.get(j)) is not None and obs.live]
            if row.lane == LADDER_LANE:  # every live job with its token, on any rung: a lost submit's reply included
                found = [o.job_id for o in scheduler.find_tokens(prefix) if o.job_id not in job_ids]
                job_ids.extend(found)
                live.extend(found)
        except SchedulerUnreachable as exc:  # (an SshLoginRefused keeps its own class and exit code)
            exc.args = (
                f"dispatch {row.id} is not withdrawn: {exc}; nothing changed (it goes on as it was): run "
                f"`fellows-fsm cancel {row.id}` again once the cluster answers",
            )
            raise
        except SlurmCommandMissing as exc:
            # This driver cannot run SLURM's commands (a PATH without them): the withdrawal is journaled now, so
            # nothing is submitted again, and its jobs are scancelled at the first tick that can (the request stays).
            with contextlib.suppress(SlurmCommandMissing):
                self._recall(row, job_ids)
            raise ScancelLater(job_ids, str(exc)) from None
        self._recall(row, job_ids)
        return live

    def _recall(self, row: DispatchRow, job_ids: list[str]) -> None:
        """Written ahead (the recall row: WITHDRAWN, then scancel): a driver restarted after this never resubmits;
        a failed scancel is safe to re-run."""
        driven = self.roster.withdrawn(row.id)
        if row.lane != LADDER_LANE and row.outcome != Outcome.WITHDRAWN:  # its command never ran: nothing to scancel
            self.executor.recall(self.roster.handoffs.lane_dispatch(row.id), job_ids)  # the recall row, HANDING_OFF
        elif row.outcome == Outcome.WITHDRAWN:
            self.executor.cancel_strays(job_ids)  # withdrawn already: its cancel runs again
        else:
            self.executor.recall(driven or restore(self.journal, row), job_ids)

    def _withdraw_paid(self, dispatch_id: str) -> list[str]:
        """A user's cancel of a followed paid job: the recall row (WITHDRAWN journaled first), then ONE delete on
        its lane (asked again each poll until it is taken); returns the paid job's name."""
        assert self.roster.paid is not None, "a router's roster follows its paid jobs"
        d = self.roster.paid.model(dispatch_id)
        if d is None:
            raise FellowsError(
                f"dispatch {dispatch_id}'s paid job is not followed by this driver; run the command again"
            )
        lane_name = self.roster.paid.following[dispatch_id][0]
        self.executor.recall(d, [])  # journaled WITHDRAWN, then the delete asked once
        why = self.roster.paid.refusals.get(dispatch_id)
        if dispatch_id in self.roster.paid.deleting:
            raise PaidLaneError(pending_delete(dispatch_id, lane_name, why or "no answer"))
        return [f"fsm-{dispatch_id}@{lane_name}"]


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
