"""The sweep's candidate last-rung margins (benchmarks/park_early_sweep.py): what the simulator plays under them."""

from __future__ import annotations

import pytest
from benchmarks.park_early_sweep import _last_rung_margin

from fellows_fsm.core import lifecycle
from fellows_fsm.sim.run import simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import synthetic_trace

TRACE = synthetic_trace(seed=1, hours=48)
LAST_RUNG_TOO = SimParams(park_early_last_rung=True)


def _placements(params: SimParams) -> list[tuple[str, str | None, float | None]]:
    """Lane, QoS and time-to-start of every job under ``estimate`` at the 600 s cap."""
    return [(o.lane, o.qos, o.start_seconds) for o in simulate(TRACE, "predictive", 600.0, params).outcomes]


def test_leaving_the_last_rung_early_changes_this_workload() -> None:
    """On this workload park_early_last_rung changes where jobs go, so the two tests below compare distinct runs."""
    assert _placements(LAST_RUNG_TOO) != _placements(SimParams(park_early_last_rung=False))


def test_a_margin_past_every_estimate_waits_out_the_last_rung_as_if_last_rung_were_off() -> None:
    """A margin of a year keeps every job on its last rung: the same placements as park_early_last_rung = false."""
    with _last_rung_margin(365 * 86_400.0, 0.0):
        margined = _placements(LAST_RUNG_TOO)
    assert margined == _placements(SimParams(park_early_last_rung=False))


def test_a_zero_margin_is_the_product_with_the_last_rung_left_early() -> None:
    """With no margin the wrapper changes nothing: the placements of park_early_last_rung = true."""
    with _last_rung_margin(0.0, 0.0):
        margined = _placements(LAST_RUNG_TOO)
    assert margined == _placements(LAST_RUNG_TOO)


def test_the_dispatch_decides_as_shipped_again_after_the_run_even_on_an_error() -> None:
    """The wrapper puts the dispatch's own early-park decision back when its block ends, also by an exception."""
    shipped = lifecycle.early_park_reason
    inside = []

    def fail_inside() -> None:
        with _last_rung_margin(60.0, 0.0):
            inside.append(lifecycle.early_park_reason)
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        fail_inside()
    assert inside[0] is not shipped
    assert lifecycle.early_park_reason is shipped
