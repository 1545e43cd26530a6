"""Taking dispatches on from the journal: after a restart (every live row) and on every tick (the rows other
processes enqueued since the last look). A ladder dispatch is rebuilt by replaying its steps (records.restore);
one pinned to a command lane waits for its command; one that had parked out is handed off by the next poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from fellows_fsm.core.vocab import FELLOWS, State
from fellows_fsm.driver.inbox import lane_from_json, spec_of
from fellows_fsm.errors import ConfigError
from fellows_fsm.journal.queries import restore
from fellows_fsm.journal.schema import DispatchRow

if TYPE_CHECKING:
    from fellows_fsm.driver.router import Router

__all__ = ["adopt", "load", "recover"]


def recover(router: Router) -> list[str]:
    """Reload every non-final dispatch from the journal, exactly where it stood; return their ids."""
    router._adopted_upto, rows = router.journal.live_after(0)
    return load(router, rows)


def adopt(router: Router) -> list[str]:
    """Take on the live dispatches journaled since the last look (by another process: a second ``submit``
    enqueues its dispatch and leaves it to whichever process drives the journal); return their ids."""
    router._adopted_upto, rows = router.journal.live_after(router._adopted_upto, known=_Driven(router))
    return load(router, rows)


def load(router: Router, rows: list[DispatchRow]) -> list[str]:
    """Take on each row: a lane-pinned one waits for its command, a ladder one is replayed; return their ids."""
    recovered = []
    for row in rows:
        if row.id in router.handoffs.running:
            continue
        spec = spec_of(row)
        settings = row.settings
        if row.lane != FELLOWS:
            fallback = settings.get("fallback")
            if fallback is not None:
                router.handoffs.pinned_lanes[row.id] = router.handoffs.lane_for(lane_from_json(fallback))
            elif row.lane not in router.handoffs.lanes:
                raise ConfigError(
                    f"dispatch {row.id} is pinned to lane {row.lane!r}, which this config ({router.config.source}) "
                    "does not define; run watch with the config it was submitted with"
                )
            router.handoffs.pending[row.id] = (row.lane, spec)
            recovered.append(row.id)
            continue
        d = restore(
            router.journal,
            row,
            controller_deadline=router.config.router.controller_deadline,
            in_place=router.config.router.change_rung == "in-place",
        )
        if not d.history:
            d.note = str(settings.get("note", ""))  # enqueued: its first step carries the preflight's note
        router.live[d.id] = d  # one never submitted (no steps) is submitted by the next poll
        if d.state in (State.FAILED_TO_GCP, State.HANDING_OFF):
            # Died before (or while) handing off: the next poll hands it off (a command already started is
            # followed, never started twice).
            router._parked_out.append(d.id)
            if d.state == State.HANDING_OFF:
                router.handing[d.id] = router.live.pop(d.id)
        router.settings[d.id] = settings
        recovered.append(d.id)
    return recovered


@attrs.frozen
class _Driven:
    """The ids a router drives, as a container (no copy)."""

    router: Router

    def __contains__(self, dispatch_id: object) -> bool:
        r = self.router
        return any(dispatch_id in ids for ids in (r.live, r.handing, r.pending_handoffs, r.running))
