"""A job that started is followed to its end: one result word and exit code, journaled once (core/ends.py)."""

from __future__ import annotations

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler
from fellows_fsm.core.effects import CancelJobs, Record
from fellows_fsm.core.ends import dispatch_result, paid_result, result_of
from fellows_fsm.core.looks import LOST_AFTER_SECONDS
from fellows_fsm.core.vocab import Outcome, Result, State
from fellows_fsm.driver.executor import NullRecorder
from tests.unit.conftest import DispatchFactory, Driven, poll


class Kept(NullRecorder):
    """Keeps every journaled step, as the journal would."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def write(self, effects: object) -> None:
        self.records += [e for e in effects if isinstance(e, Record)]  # type: ignore[attr-defined]


@pytest.fixture
def running(make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory) -> tuple[Driven, Kept]:
    """A dispatch whose first rung's job started and was seen running."""
    kept = Kept()
    d = make_dispatch(recorder=kept)
    d.submit()
    assert d.job_id is not None
    fake.start(d.job_id)
    frozen.tick(5)
    poll(d, fake)
    assert d.state == State.RUNNING
    assert not d.is_final
    return d, kept


@pytest.mark.parametrize(
    ("state", "code", "result"),
    [
        ("COMPLETED", 0, Result.SUCCEEDED),
        ("FAILED", 3, Result.FAILED),
        ("TIMEOUT", None, Result.TIMEOUT),
        ("OUT_OF_MEMORY", 137, Result.OUT_OF_MEMORY),
        ("NODE_FAIL", None, Result.NODE_FAIL),
        ("PREEMPTED", None, Result.PREEMPTED),
        ("CANCELLED by 1000", 143, Result.CANCELLED),
    ],
    ids=["exit-0", "exit-3", "timeout", "oom", "node-fail", "preempted", "scancel"],
)
def test_an_end_is_one_word_with_its_exit_code(
    running: tuple[Driven, Kept],
    fake: FakeScheduler,
    frozen: FrozenDateTimeFactory,
    state: str,
    code: int | None,
    result: Result,
) -> None:
    """Accounting's end of a running job ends the dispatch ENDED with one result word, its exit code, how long it
    ran and its GPUs, journaled once in the end step itself."""
    d, kept = running
    frozen.tick(3600)
    fake.end(d.job_id, state, exit_code=code)
    poll(d, fake)
    assert d.state == State.ENDED
    assert d.is_final
    last = kept.records[-1]
    assert last.end is not None
    assert last.final
    assert (last.end.result, last.end.exit_code, last.end.slurm_state) == (result, code, state)
    assert last.outcome == result
    assert last.end.gpus == 8
    assert last.end.elapsed_seconds == pytest.approx(3605)
    assert last.end.gpu_hours == pytest.approx(8 * 3605 / 3600)
    frozen.tick(60)
    poll(d, fake)
    assert sum(1 for r in kept.records if r.end is not None) == 1  # recorded once


def test_a_requeued_job_is_followed_where_slurm_put_it(
    running: tuple[Driven, Kept], fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job SLURM requeues is REQUEUED (never walked again, whatever its window), runs again, then ends."""
    d, kept = running
    fake.requeue(d.job_id)
    frozen.tick(10)
    poll(d, fake)
    assert d.state == State.REQUEUED
    frozen.tick(100_000)  # far past every rung's window: a requeued job is SLURM's, not the ladder's
    poll(d, fake)
    assert d.state == State.REQUEUED
    assert len(fake.jobs) == 1
    fake.start(d.job_id)
    poll(d, fake)
    assert d.state == State.RUNNING
    fake.end(d.job_id, "COMPLETED")
    poll(d, fake)
    assert d.state == State.ENDED
    assert kept.records[-1].outcome == Result.SUCCEEDED
    assert [r.step.trigger for r in kept.records[-3:]] == ["requeue", "run_again", "end"]


def test_accounting_down_is_could_not_tell_never_a_guess(
    running: tuple[Driven, Kept], fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """While sacct cannot be asked, an ended (or vanished) job is "could not tell": nothing is recorded, however
    long it lasts; once accounting answers, its end is."""
    d, kept = running
    fake.end(d.job_id, "FAILED", exit_code=3)
    fake.accounting_down = True
    for _ in range(5):
        frozen.tick(LOST_AFTER_SECONDS)
        poll(d, fake)
    assert d.state == State.RUNNING
    fake.jobs[d.job_id].forgotten = True  # squeue forgot it too, and sacct still cannot be asked
    for _ in range(5):
        frozen.tick(LOST_AFTER_SECONDS)
        poll(d, fake)
    assert d.state == State.RUNNING
    fake.jobs[d.job_id].forgotten = False
    fake.accounting_down = False
    poll(d, fake)
    assert d.state == State.ENDED
    assert kept.records[-1].end is not None
    assert (kept.records[-1].end.result, kept.records[-1].end.exit_code) == (Result.FAILED, 3)


def test_a_job_no_record_knows_is_unknown_with_a_note(
    running: tuple[Driven, Kept], fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A running job gone from squeue and from accounting is waited for, then ends ``unknown`` (never
    ``succeeded``), with a note saying why."""
    d, kept = running
    fake.forget(d.job_id)
    poll(d, fake)
    assert d.state == State.RUNNING
    frozen.tick(LOST_AFTER_SECONDS + 1)
    poll(d, fake)
    assert d.state == State.ENDED
    last = kept.records[-1]
    assert last.end is not None
    assert last.end.result == Result.UNKNOWN
    assert last.end.exit_code is None
    assert "unknown to squeue and sacct" in last.step.note


def test_a_cancel_of_a_running_dispatch_ends_it_cancelled(running: tuple[Driven, Kept], fake: FakeScheduler) -> None:
    """``fellows-fsm cancel`` of a running dispatch journals WITHDRAWN with the result ``cancelled``, then
    scancels its job."""
    d, _kept = running
    job = d.job_id
    decision = d.d.recall([job], fake.clock.now())
    assert d.state == State.WITHDRAWN
    assert d.is_final
    record = next(e for e in decision.effects if isinstance(e, Record))
    assert record.end is not None
    assert record.end.result == Result.CANCELLED
    assert record.outcome == Outcome.WITHDRAWN
    assert any(isinstance(e, CancelJobs) and e.job_ids == (job,) for e in decision.effects)


def test_paid_ends_answer_in_the_same_words() -> None:
    """A paid run's end is the same word: PAID_DONE is succeeded, PAID_FAILED failed (over its limit: timeout)."""
    assert paid_result(State.PAID_DONE, Outcome.PAID_DONE) == Result.SUCCEEDED
    assert paid_result(State.PAID_FAILED, Outcome.PAID_FAILED) == Result.FAILED
    assert paid_result(State.PAID_FAILED, Outcome.PAID_OVERRUN) == Result.TIMEOUT
    assert paid_result(State.PAID_RUNNING, "") is None
    assert dispatch_result(State.WITHDRAWN, Outcome.WITHDRAWN, final=True, ended=None) == Result.CANCELLED
    assert dispatch_result(State.REFUSED, "rejected: x", final=True, ended=None) is None
    assert dispatch_result(State.ENDED, "failed", final=True, ended="failed") == "failed"


@pytest.mark.parametrize(
    ("word", "code", "result"),
    [
        ("COMPLETED", 0, Result.SUCCEEDED),
        ("COMPLETED", 2, Result.FAILED),
        ("BOOT_FAIL", None, Result.FAILED),
        ("DEADLINE", None, Result.FAILED),
        ("CANCELLED+", None, Result.CANCELLED),
        ("WEIRD", None, Result.UNKNOWN),
    ],
)
def test_slurm_words_map_to_one_result(word: str, code: int | None, result: Result) -> None:
    """SLURM's end words map to the result words; a word it does not know is unknown, never success."""
    assert result_of(word, code) == result
