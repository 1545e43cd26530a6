"""The SLURM ladder lane: ``[fellows]`` is its table; it owns the port (the router, the effect runner, the history
cache and the check of grants all use that one port) and says the ladder is walked on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm import FakeScheduler, SlurmSettings
from fellows_fsm.config.file import Config
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.lane import SLURM, SlurmLane, ladder_lane
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.transport import SshTransport

GCP = CommandSettings(name="gcp", command=("gcloud", "{dispatch_id}"))


def test_the_fellows_table_is_the_first_slurm_lane() -> None:
    """``[fellows]`` parses through the SLURM kind unchanged, and its lane walks the ladder it names, first the
    preferred QoS; the lane after it in the order is the paid lane."""
    fellows = SLURM.parse("fellows", {"qos": "high-eur", "qos_ladder": ["low-eur"], "park_cap_seconds": 60})
    assert fellows == SlurmSettings(qos="high-eur", qos_ladder=("low-eur",), park_cap_seconds=60)
    config = Config(fellows=fellows, lanes=(GCP,))
    lane = ladder_lane(config, FakeScheduler())
    assert (lane.name, lane.kind, lane.walks_ladder, lane.manual_only) == ("fellows", "slurm", True, False)
    assert lane.ladder_for("prod").qos_names == ("high-eur", "low-eur")
    assert config.lane_named("fellows") is fellows
    assert config.following(lane.name) == "gcp"
    assert config.following("gcp") is None
    assert SLURM.parse("fellows", SLURM.table(fellows)) == fellows


def test_the_router_takes_the_port_from_the_ladder_lane(tmp_path: Path) -> None:
    """The port a router is given is its ladder lane's, and the effect runner (through the one-cluster Clusters)
    and the history cache use it too (one scheduler, held once, by the lane)."""
    fake = FakeScheduler()
    config = Config(fellows=SlurmSettings(park_cap_seconds=60.0), lanes=(GCP,), state_dir=tmp_path)
    journal = Journal(config.journal_path)
    try:
        router = Router(config, fake, journal)
        assert router.lanes.ladder == SlurmLane(config.fellows, fake)
        assert router.scheduler is fake
        assert router.executor.clusters.ports == {"fellows": fake}
        assert router.cluster_workload.scheduler is fake
        assert router.cluster_workload.span_seconds == config.fellows.calibrated_history_seconds
        assert list(router.handoffs.lanes) == ["gcp"]
    finally:
        journal.close()


def test_a_fake_port_has_no_grants_to_read_and_the_real_one_has() -> None:
    """The check of grants reads sacctmgr only through the real port; a fake port's lane has nothing to read."""
    assert ladder_lane(Config(), FakeScheduler()).read_grants() is None
    assert ladder_lane(Config(), SlurmScheduler()).read_grants() is not None


@pytest.mark.parametrize("host", [None, "login.example.org"], ids=["local", "over ssh"])
def test_the_lane_builds_its_own_port_where_its_cluster_answers(
    host: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a port given, the lane's port runs the commands here, or on ``[fellows] host`` over ssh with its
    master's socket under the state dir (a local one's grants are cached by its SLURM_CONF)."""
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/other.conf")
    config = Config(fellows=SlurmSettings(host=host), state_dir=tmp_path)
    lane = ladder_lane(config)
    assert isinstance(lane.scheduler, SlurmScheduler)
    transport = lane.scheduler.runner.transport
    if host is None:
        assert not transport.remote
        assert lane.grants_key.endswith("@/etc/slurm/other.conf")
    else:
        assert isinstance(transport, SshTransport)
        assert transport.host == host
        assert transport.control_path.parent == tmp_path / "ssh"
    built = SLURM.build(config.fellows, state_dir=tmp_path)
    assert isinstance(built.scheduler, SlurmScheduler)
    assert built.scheduler.runner.transport.remote == (host is not None)
