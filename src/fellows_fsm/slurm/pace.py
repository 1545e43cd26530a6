"""sbatch calls paced per cluster: at most ``max_submits_per_second`` on average, in bursts of as many.

A shared slurmctld answers every user; a program that dispatches hundreds of jobs at once must not take it over.
Waiting here is the driver's own politeness, never a failure (SLURM's optional rate limiter makes a throttled
sbatch sleep and retry by itself: that reads as a slow answer, see ``Dispatch.submitted``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["SubmitPace"]


class SubmitPace:
    """A token bucket: ``rate`` calls a second, ``max(1, rate)`` at once after a quiet second."""

    def __init__(
        self,
        rate: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        self._monotonic, self._sleep = monotonic, sleep
        self._tokens = self.burst
        self._at = monotonic()
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Take one call's turn, sleeping until it comes; return the seconds slept."""
        with self._lock:
            now = self._monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            short = 1.0 - self._tokens
            slept = short / self.rate if short > 0 else 0.0
            if slept:
                self._sleep(slept)
                self._at = self._monotonic()
                self._tokens = 1.0
            self._tokens -= 1.0
            return slept
