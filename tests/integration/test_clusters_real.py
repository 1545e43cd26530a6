"""Issue 26 on two real clusters: the fellows ladder walked here, then inst's reached only over its sshd, then the
paid lane; the background driver and the command line as a user runs them (outages, cancels, kill -9, ids that
collide on both clusters, an outside scancel). After each: one job ran or one handoff, nothing left pending."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import (
    cli,
    driver_pid,
    final_row,
    ledger_config,
    read_journal,
    stop_background_driver,
    submit_args,
)
from .conftest import Cluster, QueueRow
from .settled import jobs_of, ledger
from .two_clusters import SecondCluster

pytestmark = pytest.mark.slurm

CAP = 4.0
"""Each fellows rung's park cap (three rungs)."""
INST_CAP = 6.0
"""Each inst rung's park cap (two rungs)."""
POLL = 1.0
WORST = 3 * CAP + 2 * INST_CAP
"""The sum of every cluster's caps: the soonest a dispatch may reach the paid lane."""


def _config(tmp_path: Path, second: SecondCluster) -> Path:
    """fellows here, then inst over its sshd, then the gcp ledger lane; short caps, no early parking anywhere."""
    path = ledger_config(
        tmp_path, cap=CAP, poll=POLL, park_early="off", router='order = ["fellows", "inst", "gcp"]\n'
    )
    lane = second.lane_toml(extra=f'park_cap_seconds = {INST_CAP}\npark_early = "off"\n')
    path.write_text(path.read_text() + "\n" + lane, encoding="utf-8")
    return path


def _fill_fellows(slurm: Cluster) -> None:
    """Every fellows rung full: this user's high-eur and normal-eur caps taken and the node's 64 GPUs busy."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    slurm.occupy("low-eur", 8, count=4)


def _submit(config: Path, slurm: Cluster) -> str:
    """`submit --detach` of an 8-GPU job; its dispatch id."""
    result = cli(config, *submit_args(slurm, "--detach"))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _inst_job_of(second: SecondCluster, dispatch_id: str) -> QueueRow:
    """The one inst job of the dispatch."""
    [job] = second.jobs_of(dispatch_id)
    return job


def _journal_jobs(tmp_path: Path, dispatch_id: str) -> dict[int, str]:
    """The dispatch's journaled job ids by rung index."""
    with read_journal(tmp_path) as j:
        return {job.rung_index: job.job_id for job in j.jobs(dispatch_id)}


def _triggers(tmp_path: Path, dispatch_id: str) -> list[tuple[str, str]]:
    """The dispatch's steps as (trigger, qos), oldest first."""
    with read_journal(tmp_path) as j:
        return [(s.trigger, s.qos) for s in j.steps(dispatch_id)]


def _settled(slurm: Cluster, second: SecondCluster, tmp_path: Path, dispatch_ids: list[str]) -> None:
    """Each dispatch: exactly one job that ran on either cluster XOR exactly one handoff (withdrawn: neither), and
    none of its jobs left pending on either cluster."""
    handed = ledger(tmp_path)
    with read_journal(tmp_path) as j:
        for dispatch_id in dispatch_ids:
            row = j.dispatch(dispatch_id)
            assert row is not None
            jobs = [*jobs_of(slurm, dispatch_id), *second.jobs_of(dispatch_id)]
            ran = [job for job in jobs if job.ever_ran]
            assert not [job for job in jobs if job.state == "PENDING"], f"{dispatch_id}: left pending: {jobs}"
            handoffs = handed.count(dispatch_id)
            if row.state == "WITHDRAWN":
                assert (len(ran), handoffs) == (0, 0), f"{dispatch_id} withdrawn, yet {ran} ran / {handoffs} handoffs"
            else:
                assert (len(ran), handoffs) in ((1, 0), (0, 1)), f"{dispatch_id}: ran {ran}, {handoffs} handoffs"


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def test_a_full_fellows_ladder_runs_on_insts_first_free_rung_not_gcp(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """Every fellows rung full and inst-high taken by this user's own job: the dispatch walks fellows' three rungs,
    then inst-high, and RUNS on inst-low over ssh (its id named by its cluster); GCP never runs."""
    _fill_fellows(slurm)
    second_slurm.occupy("inst-high")
    config = _config(tmp_path, second_slurm)
    dispatch_id = _submit(config, slurm)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=WORST + 60)
    assert (row.label, row.qos) == ("RUNNING", "inst-low")
    assert [t for t in _triggers(tmp_path, dispatch_id) if t[0] in ("submit", "resubmit", "start")] == [
        ("submit", "high-eur"),
        ("resubmit", "normal-eur"),
        ("resubmit", "low-eur"),
        ("resubmit", "inst-high"),
        ("resubmit", "inst-low"),
        ("start", "inst-low"),
    ]
    inst_jobs = second_slurm.jobs_of(dispatch_id)
    assert [(j.qos, j.ever_ran) for j in inst_jobs] == [("inst-high", False), ("inst-low", True)]
    assert _journal_jobs(tmp_path, dispatch_id)[4] == f"{inst_jobs[1].job_id}@inst"
    assert [j.qos for j in jobs_of(slurm, dispatch_id)] == ["high-eur", "normal-eur", "low-eur"]
    assert ledger(tmp_path) == []
    _settled(slurm, second_slurm, tmp_path, [dispatch_id])
