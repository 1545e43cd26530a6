"""Fixtures for the unit suite: frozen time, the shipped fake port, and a dispatch factory; the fake clusters of the
API and command-line tests (``capped_fake``, ``scheduling_fake``), and the command line's config directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import Dispatch, FakeScheduler, JobSpec, SlurmSettings, SystemClock
from fellows_fsm.driver import process as daemon
from fellows_fsm.testing import Driven, ThreadedDriver
from fellows_fsm.ui import app as ui_app
from tests.unit.cli_helpers import CAPS, GRANTS, PRIORITY, SchedulingFake, _config_text

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
def config() -> SlurmSettings:
    """The default fellows ladder with 600 s caps."""
    return SlurmSettings(park_cap_seconds=CAP)


DispatchFactory = Callable[..., Driven]


@pytest.fixture
def make_dispatch(fake: FakeScheduler, config: SlurmSettings) -> DispatchFactory:
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


# --------------------------------------------------------------------------- the fake clusters of the API and CLI tests
@pytest.fixture
def scheduling_fake() -> SchedulingFake:
    """For the command-line tests: a SchedulingFake (it schedules its queue before each poll, on the real clock)
    with the fellows per-user GPU caps and 64 GPUs."""
    return SchedulingFake(qos_priority=PRIORITY, qos_gpu_caps=CAPS, total_gpus=64)


@pytest.fixture
def capped_fake(frozen: FrozenDateTimeFactory) -> FakeScheduler:
    """For the Python API tests: a FakeScheduler on frozen time with the fellows per-QoS GPU caps and 64 GPUs (it
    schedules only when a test says so)."""
    return FakeScheduler(qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16, "normal-eur": 16}, total_gpus=64)


@pytest.fixture
def drivers(scheduling_fake: SchedulingFake) -> Iterator[ThreadedDriver]:
    """The background driver of the command-line tests: daemon.serve on the scheduling fake, in a thread (stopped
    after the test)."""
    threaded = ThreadedDriver(scheduling_fake)
    yield threaded
    threaded.close()


@pytest.fixture
def env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheduling_fake: SchedulingFake, drivers: ThreadedDriver
) -> Path:
    """For the command-line tests: a config with 0.3 s park caps and a ledger gcp lane in tmp_path (the current
    directory), and the seams pointed at the scheduling fake (the port, the grants, and a background driver in a
    thread)."""
    config = tmp_path / "fellows.toml"
    config.write_text(_config_text(tmp_path / "state", tmp_path / "gcp.ledger"), encoding="utf-8")
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(config))
    monkeypatch.delenv("FELLOWS_FSM_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ui_app, "make_scheduler", lambda config: scheduling_fake)
    monkeypatch.setattr(ui_app, "read_grants", lambda scheduler: GRANTS)
    monkeypatch.setattr(ui_app, "start_driver", drivers)
    return tmp_path


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """An sbatch script asking for 8 GPUs, an hour, and a job name."""
    path = tmp_path / "train.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH --time=1:00:00\n#SBATCH -J train\nsleep 1\n")
    return path
