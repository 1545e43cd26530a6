"""A job someone else moved (``scontrol update`` of its QoS, partition or time limit) is their decision: the
dispatch journals it with what SLURM reports, never walks the job again, and reports where SLURM says it runs."""

from __future__ import annotations

import attrs
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import RUNNING, FakeScheduler, JobSpec, Observation, Phase
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.lifecycle import row_of
from fellows_fsm.core.vocab import Outcome
from fellows_fsm.slurm.observe import parse_squeue
from tests.unit.conftest import CAP, DispatchFactory

HIGH = "SUBMITTED_high_eur"


def _pending(job_id: str, **changes: object) -> Observation:
    """A pending observation of ``job_id`` on high-eur, partition gpu, 10 minutes, with ``changes``."""
    base = Observation(
        job_id, Phase.PENDING, "PENDING", "Priority", "high-eur", partition="gpu", time_limit_seconds=600
    )
    return attrs.evolve(base, **changes)


def test_squeue_reports_partition_and_time_limit() -> None:
    """The port's one squeue reads each job's partition and time limit as SLURM reports them."""
    obs = parse_squeue("7|PENDING|Priority|low-eur|N/A|n/a|0|debug|1-00:00:00|fsm-d1-r0|\n")["7"].observation
    assert (obs.qos, obs.partition, obs.time_limit_seconds) == ("low-eur", "debug", 86_400)


def test_an_outside_qos_change_is_deferred_to_and_never_walked(
    make_dispatch: DispatchFactory, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """QoS changed to low-eur by someone: a `defer` step naming the change, no park past the window, and the start
    is journaled on low-eur (what SLURM says), not high-eur."""
    d = make_dispatch(spec=JobSpec("train", "train.sbatch", gpus=8, time_limit_seconds=600))
    d.submit()
    assert d.job_id is not None
    d.advance(_pending(d.job_id))
    d.advance(_pending(d.job_id, qos="low-eur"))
    defer = d.history[-1]
    assert (defer.trigger, defer.qos) == ("defer", "low-eur")
    assert "QoS high-eur -> low-eur" in defer.note
    assert "someone else" in defer.note
    frozen.tick(CAP * 3)
    d.advance(_pending(d.job_id, qos="low-eur", reason="Resources"))
    assert d.state == HIGH  # its window closed long ago, and it was not walked
    assert [s.trigger for s in d.history].count("park") == 0
    d.advance(Observation(d.job_id, Phase.STARTED, "RUNNING", None, "low-eur", start_time=1.0))
    assert d.state == RUNNING
    assert d.history[-1].qos == "low-eur"
    assert "someone else moved" in d.history[-1].note


def test_an_outside_partition_or_time_limit_change_is_named(make_dispatch: DispatchFactory) -> None:
    """A changed partition or time limit (from what was first seen or submitted) is a `defer` that names both."""
    d = make_dispatch(spec=JobSpec("train", "train.sbatch", gpus=8, time_limit_seconds=600))
    d.submit()
    assert d.job_id is not None
    d.advance(_pending(d.job_id))
    d.advance(_pending(d.job_id, partition="other", time_limit_seconds=1200))
    defer = d.history[-1]
    assert defer.trigger == "defer"
    assert "partition gpu -> other" in defer.note
    assert "time limit 10 min -> 20 min" in defer.note


def test_a_job_where_the_ladder_put_it_is_not_deferred(make_dispatch: DispatchFactory) -> None:
    """The same QoS, partition and (rounded) time limit as submitted: no defer step."""
    d = make_dispatch(spec=JobSpec("train", "train.sbatch", gpus=8, time_limit_seconds=570))
    d.submit()
    assert d.job_id is not None
    d.advance(_pending(d.job_id))
    d.advance(_pending(d.job_id, reason="Resources"))
    assert "defer" not in [s.trigger for s in d.history]


def test_a_moved_job_cancelled_later_is_withdrawn_not_resubmitted(make_dispatch: DispatchFactory) -> None:
    """A job someone moved and then ended without a start is withdrawn: never resubmitted on the next rung."""
    d = make_dispatch(spec=JobSpec("train", "train.sbatch", gpus=8, time_limit_seconds=600))
    d.submit()
    assert d.job_id is not None
    d.advance(_pending(d.job_id, qos="low-eur"))
    d.advance(Observation(d.job_id, Phase.GONE, "DEADLINE", None, "low-eur"))
    assert d.state == "WITHDRAWN"


def test_a_restored_dispatch_stays_deferred(make_dispatch: DispatchFactory) -> None:
    """After a restart the journaled `defer` step keeps the dispatch off the ladder, and the outcome says why."""
    d = make_dispatch(spec=JobSpec("train", "train.sbatch", gpus=8, time_limit_seconds=600))
    d.submit()
    assert d.job_id is not None
    d.advance(_pending(d.job_id, qos="low-eur"))
    again = Dispatch.restore(d.id, d.spec, d.ladder, history=d.history, jobs={0: d.job_id})
    assert again.deferred
    assert row_of(d.history[-1].trigger).outcome == Outcome.MOVED_OUTSIDE
