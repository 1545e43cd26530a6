"""A dispatch's paid run as a user reads it: its GPU-hours and cost in words and as JSON.

Values only: the journal's ``PaidRun`` (core/paid.py) is given; nothing here reads the journal or prints.
"""

from __future__ import annotations

import math
from typing import Any

from fellows_fsm.clock import iso_utc
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import PaidStatus, State

_FOLLOWED = frozenset(
    {
        PaidStatus.QUEUED,
        PaidStatus.RUNNING,
        PaidStatus.SUCCEEDED,
        PaidStatus.CANCELLING,
        PaidStatus.CANCELLED,
        PaidStatus.GONE,
    }
)
"""A run in one of these was seen on its lane (followed)."""
_PAID_STATES = frozenset(
    {State.PAID_QUEUED, State.PAID_RUNNING, State.PAID_UNKNOWN, State.PAID_DONE, State.PAID_FAILED}
)

__all__ = ["bound_words", "cost_words", "hours_words", "paid_cell", "paid_json", "paid_words", "shows_paid"]


def shows_paid(run: PaidRun, state: str) -> bool:
    """Do the views show this run (a dispatch in ``state``): one its lane followed, or one with a price. A handoff
    to a lane with neither (a command lane as before issue 27: no ``status``, no ``price_per_gpu_hour``) shows as
    it always did: nothing is known of its run but the command's exit."""
    return run.price_per_gpu_hour is not None or run.status in _FOLLOWED or state in _PAID_STATES


def hours_words(hours: float) -> str:
    """GPU-hours for people: at most two decimals, trailing zeros dropped (``8.02``, ``16``, ``0.5``)."""
    if math.isinf(hours):
        return "unbounded"
    return f"{hours:.2f}".rstrip("0").rstrip(".")


def cost_words(cost: float | None) -> str:
    """Money in the lane's own currency, two decimals (``40.00``); ``unpriced`` when the lane has no price."""
    if cost is None:
        return "unpriced"
    return "unbounded" if math.isinf(cost) else f"{cost:.2f}"


def bound_words(run: PaidRun) -> str:
    """``≤ 16 GPU-h / ≤ 40.00``: what its time limit lets it spend at most (unpriced: the GPU-hours only)."""
    if math.isinf(run.bound_gpu_hours):
        return "no bound: no time limit"
    hours = f"≤ {hours_words(run.bound_gpu_hours)} GPU-h"
    return hours if run.bound_cost is None else f"{hours} / ≤ {cost_words(run.bound_cost)}"


def paid_cell(run: PaidRun, now: float) -> str:
    """A paid run in a table's narrow cell: GPU-hours and cost so far (``8.02·20.06``; a run its lane cannot
    follow: ``not followed``)."""
    if run.status == PaidStatus.UNFOLLOWED:
        return "not followed"
    return f"{hours_words(run.gpu_hours(now))}·{cost_words(run.cost(now))}"


def paid_words(run: PaidRun, now: float) -> str:
    """A paid run's GPU-hours and cost so far, and while it may still spend, the bound its time limit gives:
    ``1.33 GPU-h · 3.33 (≤ 16 GPU-h / ≤ 40.00)``; ended, ``8.02 GPU-h · 20.06``. A run handed to a lane with
    no ``status`` is never seen running: only its bound is known (and counted)."""
    if run.status == PaidStatus.UNFOLLOWED:
        return f"not followed: counted at {bound_words(run)}"
    said = f"{hours_words(run.gpu_hours(now))} GPU-h · {cost_words(run.cost(now))}"
    return f"{said} ({bound_words(run)})" if run.live else said


def _finite(value: float | None) -> float | None:
    """A number JSON can carry: no bound (inf) is null."""
    return None if value is None or math.isinf(value) else value


def paid_json(run: PaidRun, now: float) -> dict[str, Any]:
    """The ``paid`` object of a dispatch's JSON: ``lane``, ``status`` (the paid_runs status: queued, running,
    succeeded, failed, cancelled, ...), ``gpu_hours`` and ``cost`` so far (cost null: the lane has no price),
    ``bound_gpu_hours`` and ``bound_cost`` (GPUs times its time limit; null: no limit, or no price),
    ``price_per_gpu_hour``, ``running_at`` and ``ended_at`` (null: not seen running, not ended). A run its lane
    cannot follow (status ``unfollowed``) has null ``gpu_hours`` and ``cost``: how long it ran is never known."""
    known = run.status != PaidStatus.UNFOLLOWED
    return {
        "lane": run.lane,
        "status": run.status,
        "gpu_hours": run.gpu_hours(now) if known else None,
        "cost": run.cost(now) if known else None,
        "bound_gpu_hours": _finite(run.bound_gpu_hours),
        "bound_cost": _finite(run.bound_cost),
        "price_per_gpu_hour": run.price_per_gpu_hour,
        "running_at": iso_utc(run.running_at) if run.running_at is not None else None,
        "ended_at": iso_utc(run.ended_at) if run.ended_at is not None else None,
    }
