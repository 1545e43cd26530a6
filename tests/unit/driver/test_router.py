# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""The router on the fake port: lanes, pinning, debug intent, one observe per tick, handoff once, the start."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import ConfigError, FakeScheduler, FellowsError, JobSpec, JournalError, SlurmSettings, SubmitRejected
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.driver.inbox import enqueue
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.lock import lock_held
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.scheduler.port import Observation

from .fixtures import CAP, PRIORITY, SPEC, MakeRouter, drive, fake, fill, frozen, ledger, ledger_lane, make_router  # noqa: F401


def test_auto_order_walks_the_ladder_then_hands_to_gcp_once(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """With every rung blocked, the dispatch walks fellows' ladder, then the gcp command runs exactly once."""
    fake.total_gpus = 0  # nothing can start anywhere
    r = make_router()
    h = r.dispatch(SPEC)
    assert (h.lane, h.state, h.qos) == ("fellows", "SUBMITTED(high-eur)", "high-eur")
    drive(r, fake, frozen)
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]
    assert ledger(tmp_path, "runpod") == []
    final = r.handle(h.dispatch_id)
    assert (final.state, final.final, final.outcome) == ("HANDED_OFF", True, "handed-off")
    handoff = r.journal.handoff(h.dispatch_id)
    assert handoff is not None
    assert (handoff.status, handoff.exit_status, handoff.lane) == ("done", 0, "gcp")
    assert [j.qos for j in fake.jobs.values() if j.token] == ["high-eur", "normal-eur", "low-eur"]
    assert not fake.live_jobs(token_prefix="fsm-")


def test_capped_high_eur_walks_to_normal_eur_and_runs(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """With the user's high-eur cap full, a dispatch parks out of high-eur and runs on normal-eur, not GCP."""
    fill(fake, "high-eur")
    r = make_router()
    h = r.dispatch(SPEC)
    drive(r, fake, frozen)
    final = r.handle(h.dispatch_id)
    assert (final.state, final.qos) == ("RUNNING", "normal-eur")
    steps = r.journal.steps(h.dispatch_id)
    assert steps[1].reason == "QOSMaxGRESPerUser"
    assert ledger(tmp_path, "gcp") == []


def test_pinned_fellows_stays_pending_on_high_eur(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """--pin fellows submits on high-eur and keeps the live PENDING handle, however long it waits."""
    fill(fake, "high-eur")
    r = make_router()
    h = r.dispatch(SPEC, pin="fellows")
    for _ in range(50):
        fake.schedule()
        frozen.tick(CAP)
        r.poll()
    now = r.handle(h.dispatch_id)
    assert (now.state, now.qos, now.final) == ("SUBMITTED(high-eur)", "high-eur", False)
    assert now.slurm_job_id is not None
    assert fake.jobs[now.slurm_job_id].state == "PENDING"
    assert len([j for j in fake.jobs.values() if j.token]) == 1
    assert ledger(tmp_path, "gcp") == []


def test_pinned_gcp_goes_straight_to_gcp(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """--pin gcp starts the gcp command at once and never touches SLURM."""
    r = make_router()
    h = r.dispatch(SPEC, pin="gcp")
    assert (h.lane, h.state, h.final) == ("gcp", "HANDING_OFF", False)
    r.wait_for_handoffs()
    h = r.handle(h.dispatch_id)
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]
    assert (h.lane, h.state, h.final) == ("gcp", "HANDED_OFF", True)
    assert fake.calls["submit"] == 0
    r.poll()
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]


def test_manual_only_lane_runs_only_when_pinned(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A manual-only lane is never used by the auto order, and runs when a dispatch is pinned to it."""
    fake.total_gpus = 0
    r = make_router()
    auto = r.dispatch(SPEC)
    drive(r, fake, frozen)
    assert ledger(tmp_path, "runpod") == []
    assert ledger(tmp_path, "gcp") == [auto.dispatch_id]
    pinned = r.dispatch(SPEC, pin="runpod")
    r.wait_for_handoffs()
    assert ledger(tmp_path, "runpod") == [pinned.dispatch_id]


def test_manual_only_lane_in_the_auto_order_is_refused(tmp_path: Path) -> None:
    """A config that puts a manual-only lane in the auto order is refused, naming the lane."""
    with pytest.raises(ConfigError, match="order names 'runpod', which is manual_only"):
        Config(
            lanes=(ledger_lane("runpod", tmp_path / "x", manual_only=True),),
            router=RouterConfig(order=("fellows", "runpod")),
            state_dir=tmp_path,
        )


def test_unknown_pin_is_refused_before_anything_happens(make_router: MakeRouter, fake: FakeScheduler) -> None:
    """Pinning to a lane that is not configured names the lane and the known lanes; nothing is journaled."""
    r = make_router()
    with pytest.raises(ConfigError, match="--pin 'aws' is not a configured lane; known lanes: fellows, gcp, runpod"):
        r.dispatch(SPEC, pin="aws")
    assert r.journal.dispatches() == []
    assert fake.calls["submit"] == 0


def test_debug_intent_starts_on_dev_eur_when_configured(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With debug_qos=dev-eur, a debug dispatch is submitted on dev-eur first, its name prefixed D_."""
    r = make_router(SlurmSettings(park_cap_seconds=CAP, debug_qos="dev-eur"))
    h = r.dispatch(JobSpec("probe", "probe.sbatch", gpus=1), intent="debug")
    assert (h.state, h.qos) == ("SUBMITTED(dev-eur)", "dev-eur")
    assert h.slurm_job_id is not None
    assert fake.jobs[h.slurm_job_id].spec.name == "D_probe"
    prod = r.dispatch(SPEC)
    assert prod.qos == "high-eur"


def test_debug_intent_without_dev_eur_starts_on_high_eur(make_router: MakeRouter, fake: FakeScheduler) -> None:
    """Without debug_qos, a debug dispatch starts on high-eur like any other, its name unchanged."""
    r = make_router()
    h = r.dispatch(JobSpec("probe", "probe.sbatch", gpus=1), intent="debug")
    assert (h.state, h.qos) == ("SUBMITTED(high-eur)", "high-eur")
    assert h.slurm_job_id is not None
    assert fake.jobs[h.slurm_job_id].spec.name == "probe"


def test_one_observe_per_tick_whatever_the_number_of_dispatches(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Polling 300 live dispatches costs exactly one observe call per tick."""
    fake.total_gpus = 0
    r = make_router(max_rung_changes_per_tick=1000)
    for _ in range(300):
        r.dispatch(SPEC)
    for _ in range(5):
        before = fake.calls["observe"]
        frozen.tick(1)
        report = r.poll()
        assert fake.calls["observe"] - before == 1
        assert report.observed == 300


def test_rung_changes_per_tick_are_bounded(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """When 50 windows close together, at most max_rung_changes_per_tick dispatches park and move per tick."""
    fake.total_gpus = 0
    r = make_router(max_rung_changes_per_tick=10)
    for _ in range(50):
        r.dispatch(SPEC)
    frozen.tick(CAP)
    report = r.poll()  # 10 park, their jobs are cancelled in one call, proved gone, and resubmitted; 40 wait
    assert (report.rung_changes, report.deferred) == (10, 40)
    assert sum(1 for d in r.live.values() if d.state == "SUBMITTED_high_eur") == 40
    assert fake.calls["cancel_if_pending"] == 1
    assert sum(1 for j in fake.jobs.values() if j.state == "CANCELLED") == 10
    assert sum(1 for d in r.live.values() if d.rung_index == 1 and d.on_rung) == 10


def test_failing_gcp_command_is_a_visible_failure(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A gcp command that exits non-zero marks the dispatch handoff-failed with the command's stderr."""
    fake.total_gpus = 0
    r = make_router(fail_gcp=True)
    h = r.dispatch(SPEC)
    failures: list[str] = []
    for _ in range(200):
        frozen.tick(5)
        failures += r.poll().failures
        if not r.live:
            break
    r.wait_for_handoffs()
    failures += r.poll().failures
    assert failures == [f"dispatch {h.dispatch_id}: gcp command exited 1: quota exceeded in europe-west4"]
    assert r.handle(h.dispatch_id).outcome == "handoff-failed"
    handoff = r.journal.handoff(h.dispatch_id)
    assert handoff is not None
    assert handoff.stderr is not None
    assert "quota exceeded" in handoff.stderr


def test_rejected_first_submit_leaves_nothing_queued(make_router: MakeRouter, fake: FakeScheduler) -> None:
    """A script sbatch refuses raises SubmitRejected, queues nothing, and keeps the journal row as rejected."""
    r = make_router()
    fake.fail_next_submit(SubmitRejected("sbatch: error: Unable to open file train.sbatch"))
    with pytest.raises(SubmitRejected, match="Unable to open file"):
        r.dispatch(SPEC)
    rows = r.journal.dispatches()
    assert len(rows) == 1
    assert rows[0].final
    assert rows[0].outcome.startswith("rejected: sbatch: error: Unable to open file")
    assert not fake.live_jobs()
    assert not r.live


def test_second_router_on_a_driven_journal_is_refused(make_router: MakeRouter, tmp_path: Path) -> None:
    """Only one router drives a journal: a second one gets a JournalError naming the holder."""
    make_router()
    with pytest.raises(JournalError, match=r"is driven by another router \(pid \d+ on "):
        make_router()


def test_deferred_dispatches_move_on_in_later_ticks(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Dispatches held back by the per-tick bound move on in the following ticks, 10 at a time."""
    fake.total_gpus = 0
    r = make_router(max_rung_changes_per_tick=10)
    for _ in range(30):
        r.dispatch(SPEC)
    frozen.tick(CAP)
    moved = [r.poll().rung_changes for _ in range(4)]
    assert moved == [10, 10, 10, 0]
    assert all(d.rung_index == 1 for d in r.live.values())


def test_tick_with_cancels_still_observes_once(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A tick that parks, cancels and resubmits 20 dispatches makes one cancel call and one observe call."""
    fake.total_gpus = 0
    r = make_router(max_rung_changes_per_tick=50)
    for _ in range(20):
        r.dispatch(SPEC)
    frozen.tick(CAP)
    before = dict(fake.calls)
    report = r.poll()
    assert report.rung_changes == 20
    assert fake.calls["observe"] - before.get("observe", 0) == 1
    assert fake.calls["cancel_if_pending"] - before.get("cancel_if_pending", 0) == 1
    assert fake.calls["submit"] - before.get("submit", 0) == 20


def test_late_start_during_the_batched_cancel_wins(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A job that starts just before the router's cancel lands is RUNNING, and nothing is resubmitted."""
    fake.total_gpus = 0
    r = make_router()
    h = r.dispatch(SPEC)
    assert h.slurm_job_id is not None
    fake.jobs[h.slurm_job_id].start_on_cancel = True
    frozen.tick(CAP)
    r.poll()  # parks and sends the cancel, which the start beats
    r.poll()  # reads it back STARTED
    final = r.handle(h.dispatch_id)
    assert (final.state, final.qos, final.slurm_job_id) == ("RUNNING", "high-eur", h.slurm_job_id)
    assert [s.trigger for s in r.journal.steps(h.dispatch_id)] == ["submit", "park", "start"]
    assert fake.calls["submit"] == 1


def test_in_place_router_moves_the_job_and_never_cancels(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """With change_rung='in-place', a capped high-eur job is moved to normal-eur, same id, and runs there."""
    fill(fake, "high-eur")
    r = make_router(change_rung="in-place")
    h = r.dispatch(SPEC)
    drive(r, fake, frozen)
    final = r.handle(h.dispatch_id)
    assert (final.state, final.qos, final.slurm_job_id) == ("RUNNING", "normal-eur", h.slurm_job_id)
    assert fake.calls["cancel_if_pending"] == 0
    assert [s.trigger for s in r.journal.steps(h.dispatch_id)] == ["submit", "park", "move", "start"]
    assert [(j.rung_index, j.job_id) for j in r.journal.jobs(h.dispatch_id)] == [
        (0, h.slurm_job_id),
        (1, h.slurm_job_id),
    ]


def test_unknown_change_rung_is_refused() -> None:
    """A change_rung other than 'cancel' or 'in-place' is refused, naming the value."""
    with pytest.raises(ConfigError, match="change_rung='swap' is not known"):
        RouterConfig(change_rung="swap")


class TimedFake(FakeScheduler):
    """The fake cluster, remembering when (on the frozen clock) each observe and each cancel call came."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.observed_at: list[float] = []
        self.cancelled_at: list[float] = []

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        self.observed_at.append(time.time())
        return super().observe(job_ids)

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        self.cancelled_at.append(time.time())
        return super().cancel_if_pending(job_ids, read_back=read_back)


def test_run_observes_once_per_poll_interval_whatever_the_spread_of_deadlines(
    make_router: MakeRouter, tmp_path: Path, frozen: FrozenDateTimeFactory
) -> None:
    """30 dispatches submitted 0.3 s apart with 4 s caps and a 10 s poll: no two observes or cancel calls
    come less than one poll interval apart, and every park is acted on within one interval of its deadline."""
    fake = TimedFake(qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16, "normal-eur": 16}, total_gpus=0)
    r = make_router(
        SlurmSettings(park_cap_seconds=4, poll_interval_seconds=10),
        lanes=(ledger_lane("gcp", tmp_path / "gcp.ledger"),),
        scheduler=fake,
    )
    ids = []
    for _ in range(30):
        ids.append(r.dispatch(SPEC).dispatch_id)
        frozen.tick(0.3)

    def sleep(seconds: float) -> None:
        frozen.tick(max(seconds, 0.01))
        fake.schedule()
        if not seconds and r.running:
            time.sleep(0.02)  # the gcp commands run in real time

    r.run(sleep=sleep)
    r.journal.close()
    gaps = [b - a for a, b in itertools.pairwise(fake.observed_at)]
    assert gaps
    assert min(gaps) >= 10 - 1e-6
    cancel_gaps = [b - a for a, b in itertools.pairwise(fake.cancelled_at)]
    assert not cancel_gaps or min(cancel_gaps) >= 10 - 1e-6
    assert sorted(ledger(tmp_path, "gcp")) == sorted(ids)
    journal = Journal(r.config.journal_path)
    for dispatch_id in ids:
        steps = journal.steps(dispatch_id)
        parks = [st for st in steps if st.trigger == "park"]
        assert len(parks) == 3
        rung_entries = [st.at for st in steps if st.trigger in ("submit", "resubmit")]
        for entered, park in zip(rung_entries, parks, strict=True):
            assert park.at - (entered + 4) <= 10 + 1e-6  # decision overhead within one poll interval
    journal.close()


def test_a_job_cancelled_from_outside_withdraws_its_dispatch(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """Someone's scancel of the pending job ends the dispatch WITHDRAWN: nothing resubmitted, no GCP."""
    fill(fake, "high-eur")
    r = make_router()
    h = r.dispatch(SPEC)
    job_id = r.live[h.dispatch_id].job_id
    assert job_id is not None
    fake.end(job_id, "CANCELLED")
    drive(r, fake, frozen)
    row = r.journal.dispatch(h.dispatch_id)
    assert row is not None
    assert (row.state, row.final, row.outcome) == ("WITHDRAWN", True, "withdrawn-outside")
    assert fake.calls["submit"] == 1
    assert ledger(tmp_path, "gcp") == []
    assert "cancelled outside fellows-fsm" in r.journal.steps(h.dispatch_id)[-1].note


def test_a_held_job_waits_on_its_rung_until_released(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A held job is never parked, however long its window; once released past its window it walks on."""
    fill(fake, "high-eur")
    r = make_router()
    h = r.dispatch(SPEC)
    d = r.live[h.dispatch_id]
    assert d.job_id is not None
    fake.set_pending(d.job_id, "JobHeldUser")
    for _ in range(10):
        frozen.tick(CAP)
        r.poll()
    assert (d.state, fake.calls["submit"]) == ("SUBMITTED_high_eur", 1)
    fake.set_pending(d.job_id, "QOSMaxGRESPerUser")
    drive(r, fake, frozen)
    triggers = [s.trigger for s in r.journal.steps(h.dispatch_id)]
    assert triggers[:4] == ["submit", "hold", "release", "park"]
    assert r.handle(h.dispatch_id).qos == "normal-eur"


def test_a_reused_job_id_is_our_job_lost(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """When our job id shows another job's comment, the dispatch never adopts or cancels it: it moves on."""
    fill(fake, "high-eur")
    r = make_router()
    h = r.dispatch(SPEC)
    d = r.live[h.dispatch_id]
    assert d.job_id is not None
    stranger = fake.jobs[d.job_id]
    stranger.token = "someone-elses-job"
    fake.start(d.job_id)  # the stranger runs: never read as our start
    drive(r, fake, frozen)
    assert stranger.state == "RUNNING"  # never cancelled
    handle = r.handle(h.dispatch_id)
    assert (handle.state, handle.qos) == ("RUNNING", "normal-eur")
    assert "belongs to another job" in r.journal.steps(h.dispatch_id)[1].note


def test_a_timed_out_handoff_kills_its_whole_process_group(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A lane command whose child would finish the handoff after the timeout is killed with that child (exit 124)."""
    marker = tmp_path / "late.ledger"
    child = f"import time; time.sleep(2); open({str(marker)!r}, 'a').write('late')"
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    r = make_router(lanes=(CommandSettings(name="slow", command=(sys.executable, "-c", parent), timeout_seconds=1),))
    h = r.dispatch(SPEC, pin="slow")
    time.sleep(0.5)  # the command and its child are up
    frozen.tick(2)  # past the timeout: SIGTERM to the group
    r.reap_handoffs()
    frozen.tick(10)  # past the grace: SIGKILL if anything is left, and the result
    r.wait_for_handoffs()
    time.sleep(2.5)  # longer than the child would have taken
    handoff = r.journal.handoff(h.dispatch_id)
    assert handoff is not None
    assert (handoff.status, handoff.exit_status) == ("failed", 124)
    assert not marker.exists()


def test_a_slow_handoff_does_not_hold_up_other_dispatches(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """While one dispatch's gcp command runs, the poll loop walks another dispatch on time."""
    go = tmp_path / "go"  # the command runs until the test says (a bound of 120 s), not for a time a loaded machine
    wait = f"import os, time\nfor _ in range(2400):\n    if os.path.exists({str(go)!r}): break\n    time.sleep(0.05)"
    lane = CommandSettings(name="gcp", command=(sys.executable, "-c", wait), timeout_seconds=600)
    r = make_router(lanes=(lane,))
    slow = r.dispatch(SPEC, pin="gcp")
    fill(fake, "high-eur")
    walker = r.dispatch(SPEC)
    frozen.tick(CAP + 1)
    for _ in range(3):  # park and cancel; read back and resubmit; read back running
        r.poll()
        fake.schedule()
        frozen.tick(1)
    assert (r.handle(walker.dispatch_id).state, r.handle(walker.dispatch_id).qos) == ("RUNNING", "normal-eur")
    handoff = r.journal.handoff(slow.dispatch_id)
    assert handoff is not None
    assert handoff.status == "started"  # the slow command is still running
    go.touch()
    r.wait_for_handoffs()


def test_a_controller_outage_stops_the_ladder_clock(
    make_router: MakeRouter, fake: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """An outage longer than the whole ladder never walks a job past a free rung: the windows resume after it."""
    fill(fake, "high-eur")
    r = make_router()
    h = r.dispatch(SPEC)
    frozen.tick(CAP / 4)
    r.poll()
    fake.unreachable = True
    frozen.tick(CAP / 4)
    assert r.poll().unreachable  # the clock stops here, half-way through the window
    for _ in range(10):  # 10 caps of outage: more than the worst case of the whole ladder
        frozen.tick(CAP)
        assert r.poll().unreachable
    fake.unreachable = False
    frozen.tick(1)
    r.poll()
    assert r.handle(h.dispatch_id).state == "SUBMITTED(high-eur)"  # half of its window is left
    drive(r, fake, frozen)
    assert (r.handle(h.dispatch_id).state, r.handle(h.dispatch_id).qos) == ("RUNNING", "normal-eur")
    assert ledger(tmp_path, "gcp") == []
    triggers = [s.trigger for s in r.journal.steps(h.dispatch_id)]
    assert triggers[:3] == ["submit", "pause", "resume"]


def test_constructing_a_router_touches_neither_the_lock_nor_the_journal(tmp_path: Path, fake: FakeScheduler) -> None:
    """Router() only builds its parts: the driver lock stays free, no statement reaches the journal's database and
    the cluster is not asked; start() then takes the lock and recovers the live dispatch."""
    config = Config(fellows=SlurmSettings(park_cap_seconds=CAP), state_dir=tmp_path)
    journal = Journal(config.journal_path)
    try:
        dispatch_id = enqueue(config, journal, SPEC)
        statements: list[str] = []
        journal._db.set_trace_callback(statements.append)  # every statement the journal's connection runs
        r = Router(config, fake, journal)
        assert statements == []
        assert not lock_held(journal.lock_path)
        assert sum(fake.calls.values()) == 0
        assert not r.busy
        with pytest.raises(FellowsError, match=r"has not started: call Router.start\(\)"):
            r.poll()  # a router that does not hold the lock never ticks
        assert statements == []
        assert r.start() is r
        assert lock_held(journal.lock_path)
        assert r.driven == [dispatch_id]
    finally:
        journal.close()
