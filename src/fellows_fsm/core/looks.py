"""What a look at a job means for its dispatch: a stranger's job under our id, or a job unknown for too long, is
our job gone (a controller that restarted lost it, and may have given its id to someone else's job)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fellows_fsm.scheduler.port import COULD_NOT_TELL, Observation, Phase

if TYPE_CHECKING:
    from fellows_fsm.core.dispatch import Dispatch

__all__ = ["LOST_AFTER_SECONDS", "checked"]

_UNKNOWN = Phase.UNKNOWN  # (a module name: every look asks it, and an Enum member read off its class is slow)
LOST_AFTER_SECONDS = 120.0
"""A job unknown to squeue and sacct for this long is gone (a controller that restarted and lost it)."""


def checked(d: Dispatch, obs: Observation) -> Observation:
    """``obs`` as it bears on this dispatch: a stranger's job under our id, or a job unknown for too long, is
    our job gone (a controller that restarted lost it and reused its id); nothing else is changed."""
    token = obs.token  # ours is fsm-<dispatch id>-r<rung>
    if token is not None and not (
        token.startswith("fsm-") and token.startswith(d.id, 4) and token.startswith("-r", 4 + len(d.id))
    ):
        d.note = f"job id {obs.job_id} now belongs to another job ({obs.token}); ours was lost by the controller"
        return Observation(obs.job_id, Phase.GONE, state="LOST")
    if obs.phase is not _UNKNOWN or obs.state == COULD_NOT_TELL:
        d.unknown_since = None  # (accounting could not be asked: "could not tell", never counted toward lost)
        return obs
    if d.unknown_since is None:
        d.unknown_since = d.now
    if d.now - d.unknown_since < LOST_AFTER_SECONDS:
        return obs
    d.note = f"job {obs.job_id} unknown to squeue and sacct for {d.now - d.unknown_since:.0f} s; taken as lost"
    return Observation(obs.job_id, Phase.GONE, state="LOST")
