"""The simulated clock: a Clock whose time moves only when the simulator moves it.

The router and every Dispatch read it through the Clock protocol, as they read the system clock in
production; it never moves backwards and never sleeps.
"""

from __future__ import annotations

__all__ = ["SIM_EPOCH", "SimClock"]

SIM_EPOCH = 1_800_000_000.0
"""Where simulated time starts (epoch seconds, 2027-01-15): trace offsets are added to it."""


class SimClock:
    """Simulated wall-clock time in epoch seconds; ``advance_to`` moves it forward."""

    def __init__(self, start: float = SIM_EPOCH) -> None:
        self._now = start

    def now(self) -> float:
        """The simulated time now."""
        return self._now

    def advance_to(self, when: float) -> None:
        """Move time forward to ``when``; time never goes back."""
        if when < self._now:
            raise ValueError(f"simulated time cannot go back from {self._now} to {when}")
        self._now = when
