"""Jobs that carry a dispatch's token but are not its job: a submit whose answer a killed driver never journaled
(found on restart, on any rung the dispatch may have reached), or one that landed after its token was looked up.
A dispatch never has two live jobs: every such job is cancelled while it is pending (never once it runs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.driver.executor import Executor
from fellows_fsm.errors import SchedulerError
from fellows_fsm.scheduler.port import Observation, Phase, Scheduler

__all__ = ["TOKEN_PREFIX", "dispatch_of", "sweep"]

log = logging.getLogger(__name__)

TOKEN_PREFIX = "fsm-"  # noqa: S105 (a job comment, not a secret)
"""How every dispatch token begins (``fsm-<dispatch id>-r<rung>``: core/ladder.py ``dispatch_token``)."""


def dispatch_of(token: str | None) -> str | None:
    """The dispatch id a token names, or None for a comment that is no token."""
    if token is None or not token.startswith(TOKEN_PREFIX) or "-r" not in token:
        return None
    return token[len(TOKEN_PREFIX) :].partition("@")[0].rsplit("-r", 1)[0]  # (another lane's: ...-r<k>@<lane>)


def sweep(scheduler: Scheduler, executor: Executor, dispatches: Iterable[Dispatch]) -> list[str] | None:
    """One squeue of every job carrying a token; for each of ``dispatches``, cancel (only while pending) every job
    with its token but its own job and the one its lost submit is about to adopt; return the ids asked to cancel
    (None: SLURM did not answer, ask again later)."""
    wanted = {d.id: d for d in dispatches}
    if not wanted:
        return []
    try:
        tagged = scheduler.find_tokens(TOKEN_PREFIX)
    except SchedulerError as exc:
        log.warning("could not look for jobs carrying a dispatch's token: %s", exc)
        return None
    strays: list[str] = []
    for d_id, jobs in _by_dispatch(tagged).items():
        d = wanted.get(d_id)
        if d is None:
            continue
        keep = {d.job_id}
        mine = [o for o in jobs if o.token == d.token()]
        if d.job_id is None and d.submit_uncertain and mine:
            keep.add(max(mine, key=lambda o: _id_key(o.job_id)).job_id)  # the journal's, adopted by its next look
        for o in jobs:
            if o.job_id in keep:
                continue
            if o.phase is Phase.PENDING:
                log.warning("dispatch %s: job %s (%s) is not its job; cancelled while pending", d.id, o.job_id, o.token)
                strays.append(o.job_id)
            else:
                log.warning("dispatch %s: job %s (%s) runs beside its own job %s", d.id, o.job_id, o.token, d.job_id)
    executor.cancel_pending_strays(strays)
    return strays


def _by_dispatch(tagged: Iterable[Observation]) -> dict[str, list[Observation]]:
    found: dict[str, list[Observation]] = {}
    for o in tagged:
        d_id = dispatch_of(o.token)
        if d_id is not None:
            found.setdefault(d_id, []).append(o)
    return found


def _id_key(job_id: str) -> tuple[int, int]:
    head, _, tail = job_id.partition("@")[0].partition("_")  # (an id of another cluster: <id>@<lane>)
    return (int(head) if head.isdigit() else -1, int(tail) if tail.isdigit() else -1)
