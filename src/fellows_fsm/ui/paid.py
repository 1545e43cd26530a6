"""A dispatch's paid run as a user reads it: its GPU-hours and cost in words (its JSON object is the journal's:
journal/snapshot.py, ``paid_json``).

Values only: the journal's ``PaidRun`` (core/paid.py) is given; nothing here reads the journal or prints.
"""

from __future__ import annotations

import math

from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import PaidStatus

__all__ = ["bound_words", "cost_words", "hours_words", "paid_cell", "paid_words"]


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
