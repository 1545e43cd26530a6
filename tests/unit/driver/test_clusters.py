# ruff: noqa: F811 - the fixture imported from fixtures.py is a parameter here
"""Several SLURM clusters as lanes, on two fake ports: the walk from fellows' ladder to the next cluster's, job ids
per cluster, a cluster that does not answer, and the paid lane only after every free one."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.config.file import Config, RouterConfig, config_mapping
from fellows_fsm.driver.clusters import Clusters
from fellows_fsm.driver.router import Router
from fellows_fsm.driver.strays import dispatch_of
from fellows_fsm.errors import ConfigError
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import Phase
from tests.unit.driver.fixtures import (  # noqa: F401 (frozen: a fixture)
    PRIORITY,
    frozen,
    ledger,
    ledger_lane,
    walked_out,
)

CAP = 60.0
INST_CAP = 120.0
SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)
INST = SlurmSettings(name="inst", qos="inst-high", qos_ladder=("inst-low",), park_cap_seconds=INST_CAP, host="inst")


@pytest.fixture
def fellows(frozen: FrozenDateTimeFactory) -> FakeScheduler:
    """The fellows cluster, with no GPU free (every rung of its ladder stays pending)."""
    return FakeScheduler(qos_priority=PRIORITY, total_gpus=0)


@pytest.fixture
def inst(frozen: FrozenDateTimeFactory) -> FakeScheduler:
    """The second cluster, 8 GPUs, its own QoS; it numbers jobs from 1000 like the first (ids collide)."""
    return FakeScheduler(qos_priority={"inst-high": 2, "inst-low": 1}, total_gpus=8)


@pytest.fixture
def router(tmp_path: Path, fellows: FakeScheduler, inst: FakeScheduler) -> Iterator[Router]:
    """A started router over both clusters (fellows, then inst), then the gcp ledger lane."""
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=CAP),
        lanes=(INST, ledger_lane("gcp", tmp_path / "gcp.ledger")),
        router=RouterConfig(order=("fellows", "inst", "gcp")),
        state_dir=tmp_path,
    )
    journal = Journal(config.journal_path)
    r = Router(config, fellows, journal, ports={"inst": inst}).start()
    yield r
    journal.close()


def drive(r: Router, clusters: list[FakeScheduler], frozen: FrozenDateTimeFactory, ticks: int = 400) -> float:
    """Poll every 5 s (both clusters scheduling) until nothing is walked (final, or its job runs: followed); return
    the seconds it took."""
    start = time.time()
    for _ in range(ticks):
        for c in clusters:
            c.schedule()
        frozen.tick(5)
        r.poll()
        if not r.busy or walked_out(r):
            return time.time() - start
        if r.running:
            time.sleep(0.02)
    raise AssertionError("dispatches still live after the tick budget")


def test_the_ladder_walks_fellows_first_then_the_next_cluster() -> None:
    """The one ladder is fellows' rungs, then the next SLURM lane's, each rung carrying its lane; the worst case is
    the sum of every cluster's caps."""
    config = Config(fellows=SlurmSettings(park_cap_seconds=CAP), lanes=(INST,))
    ladder = config.ladder_for("prod")
    assert [(r.lane, r.qos) for r in ladder.rungs] == [
        ("fellows", "high-eur"),
        ("fellows", "normal-eur"),
        ("fellows", "low-eur"),
        ("inst", "inst-high"),
        ("inst", "inst-low"),
    ]
    assert ladder.rungs[3].label == "RESUBMITTED(inst-high@inst)"
    assert ladder.rungs[3].state_name == "RESUBMITTED_inst__inst_high"
    assert ladder.worst_case_seconds == 3 * CAP + 2 * INST_CAP
    assert config.auto_order == ("fellows", "inst")


def test_a_full_fellows_ladder_runs_on_the_next_cluster_not_gcp(
    router: Router, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """With no fellows rung able to start it, the job walks fellows' three rungs, then starts on inst's first rung:
    one job on each fellows rung, one on inst, and the paid lane never runs."""
    h = router.dispatch(SPEC)
    drive(router, [fellows, inst], frozen)
    final = router.handle(h.dispatch_id)
    assert (final.state, final.qos) == ("RUNNING", "inst-high")
    assert [j.qos for j in fellows.jobs.values()] == ["high-eur", "normal-eur", "low-eur"]
    assert [j.qos for j in inst.jobs.values()] == ["inst-high"]
    assert ledger(tmp_path, "gcp") == []
    jobs = {j.rung_index: j.job_id for j in router.journal.jobs(h.dispatch_id)}
    assert jobs[3] == "1000@inst"  # SLURM's id on inst, named by its cluster
    assert inst.jobs["1000"].phase is Phase.STARTED
    assert not fellows.live_jobs(token_prefix="fsm-")


def test_both_clusters_full_hand_off_once_after_the_sum_of_the_caps(
    router: Router, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """With neither cluster able to start it, the dispatch walks all five rungs and is handed to gcp exactly once,
    no sooner than the sum of every cluster's caps; no job is left on either cluster."""
    inst.total_gpus = 0
    h = router.dispatch(SPEC)
    took = drive(router, [fellows, inst], frozen)
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]
    assert took >= 3 * CAP + 2 * INST_CAP
    assert [j.qos for j in inst.jobs.values()] == ["inst-high", "inst-low"]
    assert not fellows.live_jobs(token_prefix="fsm-")
    assert not inst.live_jobs(token_prefix="fsm-")


def test_a_cluster_unreachable_when_its_turn_comes_is_passed_over_after_its_caps(
    router: Router, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """inst refuses every connection (nothing reaches it) when the walk comes to it: its windows run, it is tried
    each poll, and the dispatch reaches gcp only after the sum of every cluster's caps, with nothing queued on inst."""
    inst.unreachable, inst.unreachable_delivered = True, False
    h = router.dispatch(SPEC)
    took = drive(router, [fellows], frozen)
    assert ledger(tmp_path, "gcp") == [h.dispatch_id]
    assert took >= 3 * CAP + 2 * INST_CAP
    assert inst.jobs == {}
    assert inst.calls["submit"] >= 2 * INST_CAP / 5 - 2  # tried at each 5 s poll of its two windows
    notes = [s.note for s in router.journal.steps(h.dispatch_id)]
    assert any("inst could not be reached" in n for n in notes)


def test_an_outage_of_the_cluster_holding_the_job_stops_only_its_clock(
    router: Router, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """A dispatch pending on inst when inst stops answering pauses (no paid handoff however long it lasts), while a
    dispatch on fellows goes on walking; inst back, the first runs there and nothing was handed off for it."""
    inst.total_gpus = 0
    h = router.dispatch(SPEC)
    for _ in range(3 * int(CAP / 5) + 6):
        frozen.tick(5)
        router.poll()
    assert router.handle(h.dispatch_id).qos == "inst-high"
    inst.unreachable = True
    second = router.dispatch(SPEC)
    for _ in range(int(10 * INST_CAP / 5)):
        frozen.tick(5)
        router.poll()
    assert router.handle(h.dispatch_id).state.startswith("RESUBMITTED(inst-high@inst)")
    assert router.handle(second.dispatch_id).qos == "inst-high"  # fellows walked on; inst's first rung, unanswered
    assert ledger(tmp_path, "gcp") == []
    inst.unreachable, inst.total_gpus = False, 8
    drive(router, [fellows, inst], frozen)
    assert router.handle(h.dispatch_id).state == "RUNNING"
    assert h.dispatch_id not in ledger(tmp_path, "gcp")


def test_the_same_job_id_on_two_clusters_is_two_jobs(
    router: Router, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Job 1003 on inst and job 1003 on fellows belong to two dispatches; a cancel of the one on inst scancels
    inst's 1003 (and its own old fellows jobs; only 1003@inst, the one live, is said cancelled), never fellows' 1003,
    which stays pending and followed."""
    inst.total_gpus = 0
    inst._ids = itertools.count(1003)  # type: ignore[attr-defined]  # inst's next id is fellows' next after 3 rungs
    on_inst = router.dispatch(SPEC)
    for _ in range(3 * int(CAP / 5) + 6):
        frozen.tick(5)
        router.poll()
    assert router.handle(on_inst.dispatch_id).slurm_job_id == "1003@inst"
    on_fellows = router.dispatch(SPEC)
    assert router.handle(on_fellows.dispatch_id).slurm_job_id == "1003"
    assert router.withdraw(on_inst.dispatch_id) == ["1003@inst"]
    assert inst.jobs["1003"].phase is Phase.GONE
    assert fellows.jobs["1003"].phase is Phase.PENDING
    frozen.tick(5)
    router.poll()
    assert router.handle(on_fellows.dispatch_id).state == "SUBMITTED(high-eur)"
    assert router.handle(on_inst.dispatch_id).state == "WITHDRAWN"


def test_one_cluster_goes_straight_to_its_port() -> None:
    """With the fellows cluster alone, Clusters hands every call to its port unchanged (ids stay SLURM's own)."""
    fake = FakeScheduler(total_gpus=8)
    clusters = Clusters.of(fake)
    job_id = clusters.submit(SPEC, qos="high-eur", token="fsm-x-r0")
    assert job_id == "1000"
    assert set(clusters.observe([job_id])) == {"1000"}
    assert fake.calls["observe"] == 1


@pytest.mark.parametrize(
    ("lanes", "order", "words"),
    [
        ((INST, ledger_lane("gcp", Path("g"))), ("fellows", "gcp", "inst"), "puts the paid lane 'gcp' before the free"),
        ((INST, SlurmSettings(name="twin", qos="inst-high", qos_ladder=(), host="inst")), None, "the same rung twice"),
    ],
)
def test_bad_orders_and_lanes_are_one_line(
    lanes: tuple[object, ...], order: tuple[str, ...] | None, words: str
) -> None:
    """An order with a paid lane before a free one, and two lanes with the same rung (host, partition, QoS), are
    each refused in one line."""
    with pytest.raises(ConfigError, match=words) as caught:
        Config(lanes=lanes, router=RouterConfig(order=order))  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_a_slurm_lane_travels_to_the_background_driver_unchanged(tmp_path: Path) -> None:
    """The config the background driver is started with (config_mapping, journaled) reads back with every SLURM
    lane as it was: its keys, its place in the order and its rungs."""
    inst = SlurmSettings(
        name="inst", qos="inst-high", host="inst", partition="h200", account="inst-acct", gres="gpu:h200:{gpus}"
    )
    config = Config(lanes=(inst, ledger_lane("gcp", tmp_path / "gcp.ledger")), state_dir=tmp_path)
    again = Config.from_mapping(config_mapping(config), source="journal")
    assert again.slurm_lanes == config.slurm_lanes
    assert again.auto_order == ("fellows", "inst", "gcp")
    assert again.ladder_for("prod") == config.ladder_for("prod")


def test_a_restarted_driver_takes_up_a_job_pending_on_the_second_cluster(
    tmp_path: Path, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A driver that dies while the job pends on inst (nothing else written): the next one recovers it on its inst
    rung with its inst job (read from the journal as 1000@inst), queues nothing new, and the job runs there."""
    inst.total_gpus = 0
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=CAP),
        lanes=(INST, ledger_lane("gcp", tmp_path / "gcp.ledger")),
        state_dir=tmp_path,
    )
    journal = Journal(config.journal_path)
    first = Router(config, fellows, journal, ports={"inst": inst}).start()
    h = first.dispatch(SPEC)
    for _ in range(3 * int(CAP / 5) + 6):
        frozen.tick(5)
        first.poll()
    assert first.handle(h.dispatch_id).slurm_job_id == "1000@inst"
    journal.close()  # the driver is gone
    journal = Journal(config.journal_path)
    again = Router(config, fellows, journal, ports={"inst": inst}).start()
    assert again.live[h.dispatch_id].job_id == "1000@inst"
    assert again.live[h.dispatch_id].rung.where == "inst-high@inst"
    inst.total_gpus = 8
    drive(again, [fellows, inst], frozen)
    assert again.handle(h.dispatch_id).state == "RUNNING"
    assert len(inst.jobs) == 1
    assert ledger(tmp_path, "gcp") == []
    journal.close()


def test_a_dispatch_pinned_to_the_second_cluster_stays_on_its_first_rung(
    router: Router, fellows: FakeScheduler, inst: FakeScheduler, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """``--pin inst`` queues on inst's first rung only: nothing on fellows, never walked past its cap, never paid."""
    inst.total_gpus = 0
    h = router.dispatch(SPEC, pin="inst")
    for _ in range(int(5 * INST_CAP / 5)):
        frozen.tick(5)
        router.poll()
    d = router.live[h.dispatch_id]
    assert (d.rung.where, d.pinned, d.job_id) == ("inst-high@inst", True, "1000@inst")
    assert fellows.jobs == {}
    assert [j.qos for j in inst.jobs.values()] == ["inst-high"]
    assert ledger(tmp_path, "gcp") == []


def test_another_lanes_token_is_numbered_within_its_lane_and_names_its_dispatch() -> None:
    """inst's rungs carry fsm-<id>-r<k>@inst, k counted from inst's first rung (a rung added to fellows changes no
    inst token), and the stray sweep reads the dispatch id back from it, whatever the lane's name."""
    ladder = Config(fellows=SlurmSettings(park_cap_seconds=CAP), lanes=(INST,)).ladder_for("prod")
    assert [ladder.token_of("abc", i) for i in range(5)] == [
        "fsm-abc-r0",
        "fsm-abc-r1",
        "fsm-abc-r2",
        "fsm-abc-r0@inst",
        "fsm-abc-r1@inst",
    ]
    assert dispatch_of("fsm-abc-r1@inst") == "abc"
    assert dispatch_of("fsm-abc-r0@my-rack") == "abc"
    assert dispatch_of("fsm-abc-r2") == "abc"


@pytest.mark.parametrize(("policy", "leaves_early"), [("off", False), ("own-cap", True)])
def test_a_second_clusters_park_early_is_its_own(
    tmp_path: Path, fellows: FakeScheduler, frozen: FrozenDateTimeFactory, policy: str, leaves_early: bool
) -> None:
    """With the user's own inst-high cap full on inst, inst's own park_early decides: 'own-cap' leaves inst-high at
    once for inst-low, 'off' waits out inst-high's whole window, whatever fellows' policy (own-cap) says."""
    inst = FakeScheduler(qos_priority={"inst-high": 2, "inst-low": 1}, qos_gpu_caps={"inst-high": 8}, total_gpus=16)
    inst.start(inst.add_job(JobSpec("mine", "mine.sbatch", gpus=8), qos="inst-high").job_id)
    lane = SlurmSettings(
        name="inst",
        qos="inst-high",
        qos_ladder=("inst-low",),
        park_cap_seconds=INST_CAP,
        host="inst",
        park_early=policy,
    )
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=CAP, park_early="own-cap"), lanes=(lane,), state_dir=tmp_path
    )
    journal = Journal(config.journal_path)
    try:
        r = Router(config, fellows, journal, ports={"inst": inst}).start()
        h = r.dispatch(SPEC)
        drive(r, [fellows, inst], frozen)
        steps = {s.dest: s.at for s in r.journal.steps(h.dispatch_id)}
        left = steps["RESUBMITTED_inst__inst_low"] - steps["RESUBMITTED_inst__inst_high"]
        assert (left < INST_CAP) is leaves_early, left
        assert r.handle(h.dispatch_id).qos == "inst-low"
    finally:
        journal.close()


def test_two_lanes_on_one_login_host_share_one_ssh_master(tmp_path: Path) -> None:
    """Two SLURM lanes on the same host (two partitions behind one login node) get one ssh control socket, so one
    master connection; a lane on another host gets its own."""
    a = SlurmSettings(name="a", qos="gpu", host="login", partition="h200")
    b = SlurmSettings(name="b", qos="gpu", host="login", partition="a100")
    c = SlurmSettings(name="c", qos="gpu", host="elsewhere")
    config = Config(lanes=(a, b, c), state_dir=tmp_path)
    journal = Journal(config.journal_path)
    try:
        ports = Router(config, FakeScheduler(), journal).clusters.ports
        paths = {name: ports[name].runner.transport.control_path for name in ("a", "b", "c")}  # type: ignore[attr-defined]
        assert paths["a"] == paths["b"]
        assert paths["c"] != paths["a"]
    finally:
        journal.close()
