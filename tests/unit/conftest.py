"""Fixtures for the unit suite: frozen time, the shipped fake port, and a dispatch factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import Dispatch, FakeScheduler, FellowsConfig, JobSpec, SystemClock, daemon
from fellows_fsm.testing import Driven

__all__ = ["CAP", "START", "DispatchFactory", "Driven", "poll"]

START = "2026-11-30 12:00:00"
CAP = 600.0


@pytest.fixture(autouse=True)
def _no_background_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No unit test may start a real background driver process: a test that needs one runs ThreadedDriver."""

    def refuse(*args: object) -> None:
        raise AssertionError(
            "a unit test tried to start a real background driver; use fellows_fsm.testing.ThreadedDriver"
        )

    monkeypatch.setattr(daemon, "spawn", refuse)


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    """Freeze time at START; tests move it with tick() and move_to()."""
    with freeze_time(START) as clock:
        yield clock


@pytest.fixture
def fake(frozen: FrozenDateTimeFactory) -> FakeScheduler:
    """A fake scheduler reading the (frozen) system clock."""
    return FakeScheduler(SystemClock())


@pytest.fixture
def config() -> FellowsConfig:
    """The default fellows ladder with 600 s caps."""
    return FellowsConfig(park_cap_seconds=CAP)


DispatchFactory = Callable[..., Driven]


@pytest.fixture
def make_dispatch(fake: FakeScheduler, config: FellowsConfig) -> DispatchFactory:
    """Build (not submit) a dispatch on the fake port; keyword arguments override the defaults."""
    counter = iter(range(1, 10_000))

    def make(**kwargs: object) -> Driven:
        spec = kwargs.pop("spec", JobSpec(name="train", script="train.sbatch", gpus=8))
        ladder = kwargs.pop("ladder", config.ladder)
        recorder = kwargs.pop("recorder", None)
        d = Dispatch(f"d{next(counter)}", spec, ladder, **kwargs)  # type: ignore[arg-type]
        return Driven(d, fake, recorder)  # type: ignore[arg-type]

    return make


def poll(dispatch: Driven, fake: FakeScheduler, **kwargs: bool) -> None:
    """One tick: observe the dispatch's job through the port and advance it."""
    obs = fake.observe([dispatch.job_id]).get(dispatch.job_id) if dispatch.job_id else None  # type: ignore[arg-type]
    dispatch.advance(obs, **kwargs)
