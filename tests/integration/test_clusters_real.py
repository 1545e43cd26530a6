"""Issue 26 on two real clusters: the fellows ladder walked here, then inst's reached only over its sshd, then the
paid lane; the background driver and the command line as a user runs them (outages, cancels, kill -9, ids that
collide on both clusters, an outside scancel). After each: one job ran or one handoff, nothing left pending."""

from __future__ import annotations

import os
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
    one_error,
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


def _config(tmp_path: Path, second: SecondCluster, *, inst_cap: float = INST_CAP) -> Path:
    """fellows here, then inst over its sshd, then the gcp ledger lane; short caps, no early parking anywhere."""
    path = ledger_config(tmp_path, cap=CAP, poll=POLL, park_early="off", router='order = ["fellows", "inst", "gcp"]\n')
    lane = second.lane_toml(extra=f'park_cap_seconds = {inst_cap}\npark_early = "off"\n')
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


def _fill_inst(second: SecondCluster) -> list[str]:
    """Both inst rungs full: this user's 8-GPU cap taken on inst-high and on inst-low; the blockers' ids."""
    return [*second.occupy("inst-high"), *second.occupy("inst-low")]


def _pending_on_inst(second: SecondCluster, dispatch_id: str, qos: str = "inst-high", timeout: float = 60) -> QueueRow:
    """Wait until the dispatch's job pends on inst on ``qos``; that job."""
    found: list[QueueRow] = []

    def pending() -> bool:
        found[:] = [j for j in second.jobs_of(dispatch_id) if j.state == "PENDING" and j.qos == qos]
        return bool(found)

    second.wait_for(pending, f"dispatch {dispatch_id} to pend on inst {qos}", timeout=timeout, tick=0.2)
    return found[0]


def _submit_pinned(config: Path, slurm: Cluster) -> str:
    """`submit --pin fellows --detach` of an 8-GPU job (it stays on high-eur); its dispatch id."""
    result = cli(config, *submit_args(slurm, "--pin", "fellows", "--detach"))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


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


def test_both_clusters_full_hand_off_once_after_the_sum_of_every_clusters_caps(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """Every rung of both clusters full: the dispatch walks all five rungs and is handed to gcp exactly once, no
    sooner than the sum of every cluster's caps after its submit; nothing of it is left on either cluster."""
    _fill_fellows(slurm)
    _fill_inst(second_slurm)
    config = _config(tmp_path, second_slurm)
    dispatch_id = _submit(config, slurm)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=WORST + 60)
    assert row.state == "HANDED_OFF"
    assert ledger(tmp_path) == [dispatch_id]
    with read_journal(tmp_path) as j:
        steps = j.steps(dispatch_id)
    walked = [(s.trigger, s.qos) for s in steps if s.trigger in ("submit", "resubmit")]
    assert walked == [
        ("submit", "high-eur"),
        ("resubmit", "normal-eur"),
        ("resubmit", "low-eur"),
        ("resubmit", "inst-high"),
        ("resubmit", "inst-low"),
    ]
    handoff = next(s for s in steps if s.dest.startswith("HANDING_OFF") or s.dest == "HANDED_OFF")
    assert handoff.at - steps[0].at >= WORST
    assert [j.qos for j in second_slurm.jobs_of(dispatch_id)] == ["inst-high", "inst-low"]
    _settled(slurm, second_slurm, tmp_path, [dispatch_id])


def test_insts_sshd_down_for_less_than_a_cap_hands_nothing_off(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """inst's sshd (listener and sessions) down for 8 s of a 12 s window while the job pends on inst's last rung,
    after 5 s of it: the window's clock stops for the outage, so nothing is handed off when inst answers again past
    the window's unpaused end; its cap freed then, the job RUNS on inst-low with the same job."""
    inst_cap = 12.0
    _fill_fellows(slurm)
    blockers = _fill_inst(second_slurm)
    config = _config(tmp_path, second_slurm, inst_cap=inst_cap)
    dispatch_id = _submit(config, slurm)
    job = _pending_on_inst(second_slurm, dispatch_id, "inst-low", timeout=3 * CAP + inst_cap + 30)
    time.sleep(5)
    with second_slurm.sshd_stopped():
        time.sleep(8)
    time.sleep(2)  # inst answers again, past the end the window had if the outage were counted
    assert second_slurm.row(job.job_id).state == "PENDING"
    assert ledger(tmp_path) == []
    second_slurm.cancel(blockers[1])  # inst-low's cap freed
    row = final_row(slurm, tmp_path, dispatch_id, timeout=60)
    assert (row.label, row.qos) == ("RUNNING", "inst-low")
    assert _journal_jobs(tmp_path, dispatch_id)[4] == f"{job.job_id}@inst"
    assert ("pause", "inst-low") in _triggers(tmp_path, dispatch_id)
    assert ledger(tmp_path) == []
    _settled(slurm, second_slurm, tmp_path, [dispatch_id])


def test_a_users_cancel_while_the_job_pends_on_inst_withdraws_it_and_scancels_there(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """`fellows-fsm cancel` while the job pends on inst-high: the dispatch is WITHDRAWN, its inst job is gone (over
    ssh), nothing is resubmitted on either cluster and nothing is handed off."""
    _fill_fellows(slurm)
    _fill_inst(second_slurm)
    config = _config(tmp_path, second_slurm, inst_cap=60.0)
    dispatch_id = _submit(config, slurm)
    job = _pending_on_inst(second_slurm, dispatch_id, timeout=3 * CAP + 30)
    result = cli(config, "cancel", dispatch_id)
    assert result.returncode == 0, result.stderr
    assert f"{job.job_id}@inst" in result.stdout
    row = final_row(slurm, tmp_path, dispatch_id, timeout=30)
    assert row.state == "WITHDRAWN"
    second_slurm.wait_for(lambda: job.job_id not in second_slurm.live_ids(), f"inst job {job.job_id} to be gone")
    assert [(j.job_id, j.ever_ran) for j in second_slurm.jobs_of(dispatch_id)] == [(job.job_id, False)]
    assert ledger(tmp_path) == []
    _settled(slurm, second_slurm, tmp_path, [dispatch_id])


def test_a_cancel_while_inst_cannot_be_reached_exits_6_and_works_once_it_answers(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """`cancel` of a dispatch running on inst while inst's sshd is down exits 6 (SLURM unreachable, as the README's
    table says; it once exited 1) with one line saying nothing was withdrawn; once inst answers, `cancel` withdraws
    it and scancels its job there."""
    _fill_fellows(slurm)
    config = _config(tmp_path, second_slurm)
    dispatch_id = _submit(config, slurm)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=3 * CAP + 60)
    assert (row.label, row.qos) == ("RUNNING", "inst-high")
    [job] = second_slurm.jobs_of(dispatch_id)
    with second_slurm.sshd_stopped():
        line = one_error(cli(config, "cancel", dispatch_id, timeout=120), 6)
        assert f"dispatch {dispatch_id} is not withdrawn" in line
        assert "inst-cluster" in line
        assert f"`fellows-fsm cancel {dispatch_id}` again" in line
    with read_journal(tmp_path) as j:
        assert j.dispatch(dispatch_id).state == "RUNNING"  # type: ignore[union-attr]
    assert second_slurm.row(job.job_id).state == "RUNNING"
    result = cli(config, "cancel", dispatch_id, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"{job.job_id}@inst" in result.stdout
    second_slurm.wait_for(lambda: job.job_id not in second_slurm.live_ids(), f"inst job {job.job_id} to be gone")
    with read_journal(tmp_path) as j:
        assert j.dispatch(dispatch_id).state == "WITHDRAWN"  # type: ignore[union-attr]
    assert [q.job_id for q in second_slurm.jobs_of(dispatch_id)] == [job.job_id]  # nothing queued again on inst
    assert [q.ever_ran for q in jobs_of(slurm, dispatch_id)] == [False, False, False]
    assert ledger(tmp_path) == []


def test_a_driver_killed_while_the_job_pends_on_inst_is_replaced_and_the_job_adopted(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """kill -9 of the background driver while the job pends on inst-high, nothing running for two inst caps: the
    job is still queued there; `status` starts a new driver, which adopts that very job (the time nobody watched is
    not spent from its window) and sees it RUN on inst-high once the cap frees: one job on inst, no handoff."""
    inst_cap = 15.0
    _fill_fellows(slurm)
    blockers = _fill_inst(second_slurm)
    config = _config(tmp_path, second_slurm, inst_cap=inst_cap)
    dispatch_id = _submit(config, slurm)
    job = _pending_on_inst(second_slurm, dispatch_id, timeout=3 * CAP + 30)
    pid = driver_pid(tmp_path)
    os.kill(pid, signal.SIGKILL)
    time.sleep(2 * inst_cap)
    assert [(j.job_id, j.state) for j in second_slurm.jobs_of(dispatch_id)] == [(job.job_id, "PENDING")]
    status = cli(config, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert "started the background driver" in status.stderr
    assert driver_pid(tmp_path) != pid
    time.sleep(3 * POLL)  # the new driver's first polls, with the job still pending
    assert [(j.job_id, j.state) for j in second_slurm.jobs_of(dispatch_id)] == [(job.job_id, "PENDING")]
    second_slurm.cancel(blockers[0])  # inst-high's cap free
    row = final_row(slurm, tmp_path, dispatch_id, timeout=60)
    assert (row.label, row.qos) == ("RUNNING", "inst-high")
    assert [j.job_id for j in second_slurm.jobs_of(dispatch_id)] == [job.job_id]
    assert _journal_jobs(tmp_path, dispatch_id)[3] == f"{job.job_id}@inst"
    assert ledger(tmp_path) == []
    _settled(slurm, second_slurm, tmp_path, [dispatch_id])


def test_the_same_job_id_on_both_clusters_is_two_jobs_each_dispatch_keeps_its_own(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """Both clusters' next ids aligned: dispatch B (pinned to fellows) pends with id N on fellows while dispatch A
    pends with id N on inst; cancelling A scancels only inst's N (B's job N stays, B is not withdrawn), and B then
    RUNS with that very job once high-eur frees."""
    _fill_fellows(slurm)
    _fill_inst(second_slurm)
    config = _config(tmp_path, second_slurm, inst_cap=60.0)
    same = second_slurm.align_job_ids()
    pinned = _submit_pinned(config, slurm)
    assert _journal_jobs(tmp_path, pinned) == {0: str(same)}
    walker = _submit(config, slurm)
    job = _pending_on_inst(second_slurm, walker, timeout=3 * CAP + 30)
    assert job.job_id == str(same)
    assert _journal_jobs(tmp_path, walker)[3] == f"{same}@inst"
    assert slurm.row(str(same)).state == "PENDING"
    result = cli(config, "cancel", walker)
    assert result.returncode == 0, result.stderr
    assert final_row(slurm, tmp_path, walker, timeout=30).state == "WITHDRAWN"
    second_slurm.wait_for(lambda: str(same) not in second_slurm.live_ids(), f"inst job {same} to be gone")
    assert slurm.row(str(same)).state == "PENDING"
    with read_journal(tmp_path) as j:
        pinned_row = j.dispatch(pinned)
    assert pinned_row is not None
    assert not pinned_row.final
    slurm.cancel(next(r.job_id for r in slurm.queue() if r.qos == "high-eur" and r.state == "RUNNING"))
    row = final_row(slurm, tmp_path, pinned, timeout=60)
    assert (row.label, row.qos) == ("RUNNING", "high-eur")
    assert [j.job_id for j in jobs_of(slurm, pinned)] == [str(same)]
    assert ledger(tmp_path) == []
    _settled(slurm, second_slurm, tmp_path, [pinned, walker])


def test_an_outside_scancel_on_inst_withdraws_the_dispatch_and_resubmits_nothing(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """The job pending on inst-high scancelled there by someone else (on the inst cluster itself): the dispatch
    ends WITHDRAWN, with no further job on either cluster and no handoff."""
    _fill_fellows(slurm)
    _fill_inst(second_slurm)
    config = _config(tmp_path, second_slurm, inst_cap=60.0)
    dispatch_id = _submit(config, slurm)
    job = _pending_on_inst(second_slurm, dispatch_id, timeout=3 * CAP + 30)
    second_slurm.cancel(job.job_id)
    row = final_row(slurm, tmp_path, dispatch_id, timeout=30)
    assert row.state == "WITHDRAWN"
    time.sleep(3 * POLL)  # a few more polls: nothing is resubmitted after the withdrawal
    assert [j.job_id for j in second_slurm.jobs_of(dispatch_id)] == [job.job_id]
    assert len(jobs_of(slurm, dispatch_id)) == 3
    assert ledger(tmp_path) == []
    _settled(slurm, second_slurm, tmp_path, [dispatch_id])
