"""Taking dispatches on from the journal: after a restart (every live row) and on every tick (the rows other
processes enqueued since the last look, read through the inbox). A ladder dispatch is rebuilt by replaying its
steps (journal/queries.py ``restore``); one pinned to a command lane waits for its command; one that had parked out
is handed off by the next poll. It changes only the roster (and, at a restart, removes kept scripts no dispatch will
submit again), never the journal or the cluster.
"""

from __future__ import annotations

from fellows_fsm.config.file import Config
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.vocab import LADDER_LANE, PAID_LIVE_STATES, PaidStatus, State
from fellows_fsm.driver.inbox import enqueued, lane_from_json
from fellows_fsm.driver.roster import Roster
from fellows_fsm.errors import ConfigError
from fellows_fsm.journal.queries import restore, spec_of
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.scripts import sweep_scripts
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import HandoffLane, PaidLane

__all__ = ["adopt", "load", "recover", "recover_deletes"]


def recover(roster: Roster, journal: Journal, config: Config) -> list[str]:
    """Reload every non-final dispatch from the journal, exactly where it stood; return their ids."""
    upto, rows = journal.live_after(0)
    roster.read_upto(upto)
    sweep_scripts(journal.path.parent, lambda dispatch_id: _live(journal, dispatch_id))
    return load(roster, journal, config, rows)


def _live(journal: Journal, dispatch_id: str) -> bool | None:
    row = journal.dispatch(dispatch_id)
    return None if row is None else not row.final


def adopt(roster: Roster, journal: Journal, config: Config) -> list[str]:
    """Take on the live dispatches journaled since the last look (by another process: a second ``submit``
    enqueues its dispatch and leaves it to whichever process drives the journal); return their ids."""
    upto, rows = enqueued(journal, after=roster.adopted_upto, known=roster)
    roster.read_upto(upto)
    return load(roster, journal, config, rows)


def recover_deletes(roster: Roster, journal: Journal) -> None:
    """Paid jobs whose delete was journaled (a cancel, a stuck queue) but maybe never taken: asked again."""
    assert roster.paid is not None, "a router's roster follows its paid jobs"
    for run in journal.paid_runs(status=[PaidStatus.CANCELLING]):
        row = journal.dispatch(run.dispatch_id)
        lane = _paid_lane(roster, row) if row is not None else None
        if lane is not None:
            roster.paid.delete_later(run.dispatch_id, run.lane, lane)


def _paid_lane(roster: Roster, row: DispatchRow) -> PaidLane | None:
    """The paid lane a dispatch was handed to, as it was created with it (None: a lane that cannot be followed)."""
    fallback = row.settings.get("fallback")
    lane: HandoffLane | None = None
    if fallback is not None:
        lane = roster.handoffs.lane_for(lane_from_json(fallback))
    elif row.lane != LADDER_LANE:
        lane = roster.handoffs.lanes.get(row.lane)
    return lane if isinstance(lane, PaidLane) and lane.follows else None


def _follow(roster: Roster, journal: Journal, row: DispatchRow, d: Dispatch | LaneDispatch) -> bool:
    """Follow a recovered paid dispatch (PAID_QUEUED, PAID_RUNNING) on its lane; False if it cannot be."""
    handoff = journal.handoff(row.id)
    lane = _paid_lane(roster, row)
    if lane is None or handoff is None or roster.paid is None:
        return False
    roster.paid.follow(d, handoff.lane, lane)
    return True


def load(roster: Roster, journal: Journal, config: Config, rows: list[DispatchRow]) -> list[str]:
    """Take on each row: a lane-pinned one waits for its command, a ladder one is replayed; return their ids."""
    recovered = []
    for row in rows:
        if row.id in roster.running:
            continue
        settings = row.settings
        if row.state in PAID_LIVE_STATES and row.lane != LADDER_LANE:  # pinned to a followed lane: its job is followed
            if _follow(roster, journal, row, roster.handoffs.lane_dispatch(row.id)):
                recovered.append(row.id)
            continue
        if row.lane != LADDER_LANE:
            fallback = settings.get("fallback")
            created_with = None
            if fallback is not None:
                created_with = roster.handoffs.lane_for(lane_from_json(fallback))
            elif row.lane not in roster.handoffs.lanes:
                raise ConfigError(
                    f"dispatch {row.id} is pinned to lane {row.lane!r}, which this config ({config.source}) "
                    "does not define; run watch with the config it was submitted with"
                )
            roster.wait_for_command(row.id, row.lane, spec_of(row), created_with)
            recovered.append(row.id)
            continue
        d = restore(
            journal,
            row,
            controller_deadline=config.router.controller_deadline,
            in_place=config.router.change_rung == "in-place",
            ladders=roster.ladders,
            specs=roster.specs,
        )
        if d.state in PAID_LIVE_STATES:
            if _follow(roster, journal, row, d):
                recovered.append(d.id)
            continue
        if not d.history:
            d.note = str(settings.get("note", ""))  # enqueued: its first step carries the preflight's note
        # One never submitted (no steps) is submitted by the next poll. One that died before (or while) handing
        # off is handed off by the next poll (a command already started is followed, never started twice).
        parked_out = d.state in (State.FAILED_TO_GCP, State.HANDING_OFF)
        roster.take(d, settings, parked_out=parked_out, handing=d.state == State.HANDING_OFF)
        recovered.append(d.id)
    return recovered
