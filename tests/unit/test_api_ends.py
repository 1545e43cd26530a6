"""The Python API follows a job to its end: ``Fellows.wait`` returns its result (WaitTimeout at its timeout),
``follow(..., until="end")`` follows to the end while ``follow`` still returns once the job runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import Config, FakeScheduler, Fellows, JobSpec, SlurmSettings
from fellows_fsm.config.file import RouterConfig
from fellows_fsm.core.vocab import Result, State
from fellows_fsm.errors import WaitTimeout

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)


@pytest.fixture
def fellows(tmp_path: Path, capped_fake: FakeScheduler, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fellows]:
    """A Fellows driving in this process on the fake port (5 s polls, running jobs looked at every 10 s)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sbatch").write_text("#!/bin/bash\nsleep 1\n", encoding="utf-8")
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=60, poll_interval_seconds=5),
        router=RouterConfig(follow_interval_seconds=10),
        state_dir=tmp_path,
    )
    with Fellows(config, scheduler=capped_fake) as f:
        yield f


def _sleep(frozen: FrozenDateTimeFactory, fake: FakeScheduler, job: list[str], end_at: int, *ends: object) -> object:
    """A sleep that moves frozen time on, starts the job at once and ends it at the ``end_at``-th sleep."""
    calls = [0]

    def sleep(seconds: float) -> None:
        calls[0] += 1
        frozen.tick(max(seconds, 0.01))
        if calls[0] == 1:
            fake.start(job[0])
        if calls[0] == end_at:
            fake.end(job[0], *ends)  # type: ignore[arg-type]

    return sleep


def test_wait_returns_the_result_once_the_job_ended(
    fellows: Fellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """``wait`` blocks past RUNNING until the job ended and returns its word; the handle carries it and the exit
    code."""
    dispatch_id = fellows.submit(SPEC).dispatch_id
    job = [fellows.handle(dispatch_id).slurm_job_id or ""]
    assert fellows.wait(dispatch_id, sleep=_sleep(frozen, capped_fake, job, 6, "FAILED")) == Result.FAILED  # type: ignore[arg-type]
    handle = fellows.handle(dispatch_id)
    assert (handle.state, handle.final, handle.result, handle.exit_code) == (State.ENDED, True, Result.FAILED, None)


def test_wait_gives_up_at_its_timeout(
    fellows: Fellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job still running at the timeout: WaitTimeout (exit 124), the dispatch goes on, RUNNING."""
    dispatch_id = fellows.submit(SPEC).dispatch_id
    job = [fellows.handle(dispatch_id).slurm_job_id or ""]
    with pytest.raises(WaitTimeout, match="not ended after 30 s") as raised:
        fellows.wait(dispatch_id, 30, sleep=_sleep(frozen, capped_fake, job, 10_000))  # type: ignore[arg-type]
    assert raised.value.exit_code == 124
    assert fellows.handle(dispatch_id).state == State.RUNNING


def test_follow_returns_at_running_and_until_end_at_the_end(
    fellows: Fellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """``follow`` still returns once the job runs; ``follow(until="end")`` follows it to its end."""
    dispatch_id = fellows.submit(SPEC).dispatch_id
    job = [fellows.handle(dispatch_id).slurm_job_id or ""]
    sleep = _sleep(frozen, capped_fake, job, 8, "COMPLETED")
    running = fellows.follow(dispatch_id, sleep=sleep)  # type: ignore[arg-type]
    assert (running.state, running.final, running.result) == (State.RUNNING, False, None)
    ended = fellows.follow(dispatch_id, until="end", sleep=sleep)  # type: ignore[arg-type]
    assert (ended.state, ended.result, ended.exit_code) == (State.ENDED, Result.SUCCEEDED, 0)
