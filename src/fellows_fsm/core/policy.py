"""When a rung is left before its window closes (``[fellows] park_early``): the one place that decides it.

It only ever makes a park earlier, never later: the park cap still closes every window, so the worst case
before the paid lane never grows. It reads one observation (the pending reason and SLURM's start estimate,
both from the poll's one squeue) and the window's end; it does no I/O and keeps no state.
"""

from __future__ import annotations

import time

from fellows_fsm.scheduler import Observation, Phase, ReasonGroup

__all__ = ["DEFAULT_PARK_EARLY", "DEFAULT_PARK_EARLY_LAST_RUNG", "PARK_EARLY_POLICIES", "park_early_reason"]

PARK_EARLY_POLICIES = ("off", "own-cap", "estimate")
"""off: wait out every window. own-cap: leave at once while the user's own per-QoS cap holds the job back.
estimate: leave once SLURM's start estimate lies past the window's end."""
DEFAULT_PARK_EARLY = "own-cap"
"""The default, chosen from the sweep in docs/benchmarks.md (section "park_early"): with time limits 2x or 10x the
durations, leaving contended rungs on SLURM's (too late) estimates lost free-cluster share against own-cap."""
DEFAULT_PARK_EARLY_LAST_RUNG = False
"""By default the last rung (leaving it pays) waits out its window: start estimates come from time limits and err
late, and on workloads whose limits exceed the durations, leaving the last rung on them sent jobs to GCP that the
free cluster would have started (the sweep in docs/benchmarks.md). Nor did a margin past the window's end (fixed,
or a fraction of the job's time limit) meet both targets: one small enough for the median with exact limits still
sent such jobs to GCP with 10x limits, one large enough to keep them left the median near own-cap's."""


def _clock(at: float, other: float) -> str:
    """``at`` as a local wall-clock time; with its date when it is not on ``other``'s day."""
    day = time.strftime("%Y-%m-%d", time.localtime(at))
    hms = time.strftime("%H:%M:%S", time.localtime(at))
    return hms if day == time.strftime("%Y-%m-%d", time.localtime(other)) else f"{day} {hms}"


def park_early_reason(
    policy: str, observation: Observation | None, window_end: float, *, last_rung: bool = False
) -> str | None:
    """Why the job should leave its rung now, before ``window_end``; None to wait (the cap still decides).

    ``observation`` is the fresh look at the job on this rung; ``last_rung`` only words the note (leaving the
    last rung hands the job to the paid lane). Whether the last rung is left early at all is the caller's
    choice (``[fellows] park_early_last_rung``).

    estimate without an estimate: the user's own per-QoS cap leaves at once, as own-cap does (SLURM 22.05 gives
    no estimate to a job its QoS's per-user limit holds back, even when the jobs in the way have time limits: N/A
    in squeue's %S and StartTime, scontrol and squeue --start alike, scripts/measure-start-estimate; and the next
    rung's budget is free now); any other reason waits for the cap (N/A there is a job the backfill has not
    planned yet). An estimate at or before the window's end keeps the job (it is expected to start in time),
    whatever the reason.
    """
    if policy == "off" or observation is None or observation.phase is not Phase.PENDING:
        return None
    group = observation.reason_group
    if group is ReasonGroup.HELD:
        return None  # someone's decision: never walked away from
    where = "the paid lane" if last_rung else "the next rung"
    own_cap = group is ReasonGroup.OWN_CAP
    if policy == "own-cap":
        if own_cap:
            return f"{observation.reason}: your own jobs fill this QoS's per-user cap; leaving for {where}"
        return None
    expected = observation.expected_start
    if expected is None and own_cap:
        return f"{observation.reason} and SLURM gives no start estimate; leaving for {where}"
    if expected is None or expected <= window_end:
        return None
    return f"start estimated {_clock(expected, window_end)}, window ends {_clock(window_end, expected)}"
