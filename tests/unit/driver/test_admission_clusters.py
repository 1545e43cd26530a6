"""The check before the first sbatch with several SLURM lanes: each cluster's rungs against that cluster's own grants,
its partition and account too, and every refusal one line naming the lane."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from fellows_fsm import FakeScheduler, FellowsConfig, JobSpec
from fellows_fsm.clock import SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.driver.admission import Check, check_request
from fellows_fsm.errors import ConfigError, SchedulerUnreachable, SubmitRejected
from fellows_fsm.lanes.slurm.lane import SlurmLane
from fellows_fsm.slurm.accounting import Association, Grants, QosInfo

FELLOWS_QOS = ("high-eur", "normal-eur", "low-eur")
SPEC = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=3600)


def grants(qos: dict[str, QosInfo], *, account: str, partitions: frozenset[str] | None = None) -> Grants:
    """One user's association on a cluster granting every QoS of ``qos``."""
    assoc = Association("c", account, "me", "", frozenset(qos), None)
    return Grants(user="me", associations=(assoc,), qos=qos, partitions=partitions)


FELLOWS_GRANTS = grants({q: QosInfo(q) for q in FELLOWS_QOS}, account="lab-acct")
INST_QOS = {"inst-high": QosInfo("inst-high", max_gpus_per_user=4), "inst-low": QosInfo("inst-low")}


def check(
    tmp_path: Path,
    inst: FellowsConfig,
    read: Callable[[], Grants],
    spec: JobSpec = SPEC,
) -> Check:
    """The check of ``spec`` on fellows then ``inst``, each cluster's grants from its own read."""
    spec = script_in(tmp_path, spec)
    config = Config(fellows=FellowsConfig(park_cap_seconds=60.0), lanes=(inst,), state_dir=tmp_path)
    fellows = SlurmLane(config.fellows, FakeScheduler())
    other = SlurmLane(inst, FakeScheduler())
    return check_request(
        config,
        config.route(),
        spec,
        lane=fellows,
        clock=SystemClock(),
        read=lambda: FELLOWS_GRANTS,
        others=[(other, read)],
    )


def script_in(tmp_path: Path, spec: JobSpec) -> JobSpec:
    """``spec`` with its script written in ``tmp_path`` (the check reads it, as the command line does)."""
    script = tmp_path / spec.script
    script.write_text("#!/bin/bash\n")
    return attrs.evolve(spec, script=str(script))


def inst_lane(**keys: object) -> FellowsConfig:
    """The second cluster's lane, over ssh, with its own two QoS."""
    table: dict[str, object] = {"qos": "inst-high", "qos_ladder": ("inst-low",), "host": "inst", **keys}
    return FellowsConfig(name="inst", **table)  # type: ignore[arg-type]


def test_a_rung_that_never_fits_on_the_second_cluster_is_dropped_and_named(tmp_path: Path) -> None:
    """inst-high's per-user cap of 4 GPUs can never start an 8-GPU job: the rung is left out (named with its
    cluster), and the ladder is fellows' three rungs, then inst-low, each keeping its lane."""
    result = check(tmp_path, inst_lane(), lambda: grants(INST_QOS, account="inst-acct"))
    assert result.refused is None
    assert result.ladder is not None
    assert [(r.index, r.lane, r.qos) for r in result.ladder.rungs] == [
        (0, "fellows", "high-eur"),
        (1, "fellows", "normal-eur"),
        (2, "fellows", "low-eur"),
        (3, "inst", "inst-low"),
    ]
    assert "skipping inst-high" in result.note
    assert result.note.endswith("on inst")


@pytest.mark.parametrize(
    ("keys", "partitions", "words"),
    [
        (
            {"qos": "inst-top"},
            None,
            r"^QoS 'inst-top' .* does not exist on this cluster .*fix the name in \[lanes\.inst\]",
        ),
        ({"account": "lab-acct"}, None, r"^\[lanes\.inst\] account='lab-acct' is not an account of user 'me'"),
        ({"partition": "a100"}, frozenset({"h200"}), r"^\[lanes\.inst\] partition='a100' does not exist .*h200"),
    ],
)
def test_what_the_second_cluster_does_not_have_is_refused_in_one_line(
    tmp_path: Path, keys: dict[str, object], partitions: frozenset[str] | None, words: str
) -> None:
    """A QoS, an account or a partition the second cluster does not have refuses the request (exit 3) in one line
    naming the lane's table and the key, before anything is queued."""
    inst = inst_lane(**keys)
    result = check(tmp_path, inst, lambda: grants(INST_QOS, account="inst-acct", partitions=partitions))
    assert isinstance(result.refused, ConfigError)
    assert "\n" not in str(result.refused)
    assert result.refused.exit_code == 3
    assert re.search(words, str(result.refused)), str(result.refused)


def test_grants_unreadable_on_the_second_cluster_are_a_warning(tmp_path: Path) -> None:
    """inst not answering sacctmgr leaves its rungs unchecked, with a warning naming [lanes.inst]; fellows' are
    checked as usual."""

    def down() -> Grants:
        raise SchedulerUnreachable("ssh: connect to host inst port 22: Connection refused", delivered=False)

    result = check(tmp_path, inst_lane(), down)
    assert result.refused is None
    assert result.ladder is not None
    assert [r.where for r in result.ladder.rungs][3:] == ["inst-high@inst", "inst-low@inst"]
    assert any("[lanes.inst]" in w and "unchecked" in w for w in result.warnings)


def test_a_job_no_cluster_can_start_is_refused(tmp_path: Path) -> None:
    """A job over every rung's MaxWall on both clusters is refused (exit 5) naming every rung with its cluster."""
    short = {q: QosInfo(q, max_wall_seconds=60) for q in FELLOWS_QOS}
    config = Config(fellows=FellowsConfig(park_cap_seconds=60.0), lanes=(inst_lane(),), state_dir=tmp_path)
    fellows = SlurmLane(config.fellows, FakeScheduler())
    other = SlurmLane(config.lanes[0], FakeScheduler())  # type: ignore[arg-type]
    inst_short = {q: QosInfo(q, max_wall_seconds=60) for q in INST_QOS}
    result = check_request(
        config,
        config.route(),
        script_in(tmp_path, SPEC),
        lane=fellows,
        clock=SystemClock(),
        read=lambda: grants(short, account="lab-acct"),
        others=[(other, lambda: grants(inst_short, account="inst-acct"))],
    )
    assert isinstance(result.refused, SubmitRejected)
    assert "inst-high@inst" in str(result.refused)
    assert "high-eur" in str(result.refused)
