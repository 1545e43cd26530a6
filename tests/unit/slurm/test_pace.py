"""SubmitPace: sbatch calls paced to a rate, in bursts of as many, on a fake clock."""

from __future__ import annotations

from fellows_fsm.slurm.pace import SubmitPace


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_of_rate_calls_goes_at_once_and_the_rest_are_spaced_evenly() -> None:
    """At 10 a second: ten calls at once sleep not at all, the next ten take a second between them."""
    clock = _Clock()
    pace = SubmitPace(10.0, monotonic=clock.monotonic, sleep=clock.sleep)
    for _ in range(20):
        pace.wait()
    assert len(clock.slept) == 10
    assert abs(clock.now - 1.0) < 1e-9


def test_a_quiet_second_refills_the_burst() -> None:
    """After a second with no call, as many calls as the rate go at once again."""
    clock = _Clock()
    pace = SubmitPace(5.0, monotonic=clock.monotonic, sleep=clock.sleep)
    for _ in range(5):
        pace.wait()
    clock.now += 1.0
    for _ in range(5):
        assert pace.wait() == 0.0
    assert pace.wait() > 0.0
