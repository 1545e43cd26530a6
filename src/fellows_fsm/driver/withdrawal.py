"""What is asked of a journal's driver from outside its tick: a user's cancel (journaled by another process as a
request, or asked directly), and the cleanup of a Ctrl-C while a first job was being queued.

Each is a row of the table (recall, interrupt: lifecycle.py), fired on the dispatch and run by the driver, which
journals WITHDRAWN first and then scancels; these functions find the dispatch and its jobs, and answer the asker.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ladder import dispatch_token
from fellows_fsm.core.vocab import FELLOWS, Outcome
from fellows_fsm.errors import ConfigError, FellowsError, Interrupted, SchedulerError
from fellows_fsm.journal.queries import refuse_handed_off, restore
from fellows_fsm.scheduler.port import Phase

if TYPE_CHECKING:
    from fellows_fsm.driver.router import Router

__all__ = ["CANCEL_ANSWER", "CANCEL_REQUEST", "take_requests", "withdraw", "withdraw_interrupted"]

CANCEL_REQUEST = "cancel:"
"""The meta key prefix of a cancel another process asks of the driver (the driver does every port call)."""
CANCEL_ANSWER = "cancelled:"
"""The meta key prefix of the driver's answer to a cancel request."""
log = logging.getLogger(__name__)

INTERRUPT_LOOKUPS = 4
"""How many times (a second apart) an interrupted submit's token is looked up before it is taken as never queued."""


def withdraw_interrupted(router: Router, d: Dispatch) -> Interrupted:
    """Ctrl-C while ``d`` was being queued: cancel whatever reached the cluster and withdraw it.

    The cleanup itself ignores further Ctrl-C. If SLURM cannot be asked (it does not answer), the
    dispatch is left live for `watch` (which looks its token up first, so never twice) and says so.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        if router.journal.dispatch(d.id) is None:
            return Interrupted("interrupted before anything was journaled or queued; nothing to undo")
        try:
            job_id = d.job_id
            if job_id is None:
                job_id = settled_lookup(router, d)
            router.executor.interrupt(d, job_id)  # journaled WITHDRAWN first, then its job (if any) scancelled
        except SchedulerError as exc:
            return Interrupted(
                f"interrupted while dispatch {d.id} was being queued, and SLURM did not answer ({exc}); it is "
                f"left to `fellows-fsm watch` (never queued twice) or `fellows-fsm cancel {d.id}`"
            )
        queued = f"its job {job_id} cancelled" if job_id is not None else "nothing was queued"
        return Interrupted(f"interrupted: dispatch {d.id} withdrawn ({queued})")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def settled_lookup(router: Router, d: Dispatch) -> str | None:
    """The job an interrupted sbatch may have created, looked up by token a few times: a controller that was
    slow to answer can still be working through the request when the first look comes."""
    for attempt in range(INTERRUPT_LOOKUPS):
        if attempt:
            time.sleep(1.0)
        found = router.scheduler.find_by_token(d.token())
        if found is not None:
            return found.job_id
    return None


def sweep_interrupted(router: Router) -> None:
    """Cancel any job that a recently interrupted submit created after it was withdrawn (looked up once)."""
    for row in router.journal.ended_since(Outcome.WITHDRAWN_INTERRUPTED, router.clock.now() - 3600):
        try:
            found = router.scheduler.find_by_token(dispatch_token(row.id, 0))
            if found is not None and found.phase is not Phase.GONE:
                log.warning("dispatch %s was withdrawn, yet job %s carries its token: cancelling", row.id, found.job_id)
                router.executor.cancel_strays([found.job_id])
        except SchedulerError as exc:
            log.warning("could not look for a late job of withdrawn dispatch %s: %s", row.id, exc)


def take_requests(router: Router) -> list[str]:
    """Do what other processes asked of this journal's driver (a ``cancel``); return the ids withdrawn.

    A request is a meta row ``cancel:<id>``; its answer is written as ``cancelled:<id>`` (the job ids, or
    the error), for the asking process to read, and the request is dropped."""
    done = []
    for dispatch_id in router.journal.meta_with_prefix(CANCEL_REQUEST):
        answer: dict[str, Any]
        try:
            answer = {"jobs": router.withdraw(dispatch_id)}
            done.append(dispatch_id)
        except FellowsError as exc:
            answer = {"error": str(exc), "exit_code": exc.exit_code}
        router.journal.put_meta(CANCEL_ANSWER + dispatch_id, answer)
        router.journal.drop_meta(CANCEL_REQUEST + dispatch_id)
    return done


def withdraw(router: Router, dispatch_id: str) -> list[str]:
    """Withdraw a dispatch (a user's ``cancel``): journal it final (``withdrawn``) first, then scancel every
    job it got, whatever its state; return their ids. It is never advanced again.

    A dispatch handed to a command lane cannot be taken back (FellowsError): cancel it in that lane.
    """
    row = router.journal.dispatch(dispatch_id)
    if row is None:
        raise ConfigError(f"dispatch {dispatch_id!r} is not in the journal {router.journal.path}")
    refuse_handed_off(router.journal, row)
    job_ids = list(dict.fromkeys([*(j.job_id for j in router.journal.jobs(row.id)), *filter(None, [row.job_id])]))
    # A controller that restarted on stale state may have given one of these ids to someone else's job:
    # cancel only what still carries this dispatch's token (or what squeue no longer knows at all).
    prefix = dispatch_token(row.id, 0)[:-1]
    seen = router.scheduler.observe(job_ids) if job_ids else {}
    job_ids = [j for j in job_ids if (obs := seen.get(j)) is None or obs.token is None or obs.token.startswith(prefix)]
    if row.lane == FELLOWS:  # every live job with its token, on any rung: a submit whose reply was lost included
        job_ids.extend(o.job_id for o in router.scheduler.find_tokens(prefix) if o.job_id not in job_ids)
    # Written ahead (the recall row: WITHDRAWN, then scancel): a driver restarted after this never resubmits;
    # a failed scancel is safe to re-run.
    router.handoffs.pending.pop(row.id, None)
    if row.id in router._parked_out:
        router._parked_out.remove(row.id)
    if row.lane != FELLOWS and row.outcome != Outcome.WITHDRAWN:  # its command never ran: nothing to scancel
        router.executor.recall(router.handoffs.lane_dispatch(row.id), job_ids)  # the recall row from HANDING_OFF
    elif row.outcome == Outcome.WITHDRAWN:
        router.executor.cancel_strays(job_ids)  # withdrawn already: its cancel runs again
    else:
        d = router.live.pop(row.id, None) or restore(router.journal, row)
        router.executor.recall(d, job_ids)
    router.live.pop(row.id, None)
    return job_ids


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
