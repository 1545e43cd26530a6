"""Accounting discovery (sacctmgr parsing) and the ladder check against grants and limits."""

from __future__ import annotations

import pytest

from fellows_fsm.errors import ConfigError, SchedulerError
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fields import gpu_count, parse_duration
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.accounting import Association, Grants, QosInfo, check_ladder, discover, parse_assoc, parse_qos
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.transport import Reply, Request

# As printed by the dev cluster's sacctmgr (Slurm 22.05.8).
QOS_OUTPUT = """normal|0||||
high-eur|100000|7-00:00:00|gres/gpu=16||
normal-eur|50000|7-00:00:00|gres/gpu=16||
low-eur|10000|14-00:00:00|||
dev-eur|200000|1-00:00:00|gres/gpu=8||
other-eur|10000||||
"""
ASSOC_OUTPUT = """fellows|lab-acct|root||dev-eur,high-eur,low-eur,normal,normal-eur|normal-eur|
fellows|root|root||dev-eur,high-eur,low-eur,normal,normal-eur|normal-eur|
"""
DAY = 86_400


def _sacctmgr(assoc: tuple[int, str, str], qos: tuple[int, str, str]) -> MockRunner:
    """A runner answering ``sacctmgr ... show <what>`` (assoc or qos) with the given (rc, stdout, stderr)."""
    answers = {"assoc": assoc, "qos": qos}

    def handler(request: Request) -> Reply:
        returncode, stdout, stderr = answers[request.argv[request.argv.index("show") + 1]]
        return Reply(returncode, stdout, stderr, 0.001)

    return MockRunner(handler)


def _grants(**qos_overrides: QosInfo) -> Grants:
    qos = parse_qos(QOS_OUTPUT)
    qos.update(qos_overrides)
    return Grants(user="root", associations=parse_assoc(ASSOC_OUTPUT), qos=qos)


def _ladder(*names: str, cap: float = 60.0) -> SlurmSettings:
    return SlurmSettings(qos=names[0], qos_ladder=list(names[1:]), park_cap_seconds=cap)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("7-00:00:00", 7 * DAY, id="seven-days"),
        pytest.param("1-00:00:00", DAY, id="one-day"),
        pytest.param("14-00:00:00", 14 * DAY, id="fourteen-days"),
        pytest.param("2-03:04:05", 2 * DAY + 3 * 3600 + 4 * 60 + 5, id="days-hms"),
        pytest.param("1-12", DAY + 12 * 3600, id="days-hours"),
        pytest.param("1-12:30", DAY + 12 * 3600 + 30 * 60, id="days-hours-minutes"),
        pytest.param("12:30:15", 12 * 3600 + 30 * 60 + 15, id="hms"),
        pytest.param("30:15", 30 * 60 + 15, id="ms"),
        pytest.param("45", 45 * 60, id="minutes"),
        pytest.param("", None, id="empty"),
        pytest.param("UNLIMITED", None, id="unlimited"),
    ],
)
def test_parse_duration(text: str, seconds: int | None) -> None:
    """Every MaxWall form sacctmgr prints reads as seconds; empty means no limit."""
    assert parse_duration(text) == seconds


def test_parse_duration_refuses_garbage() -> None:
    """A value that is no SLURM duration is an error, not a silent 'no limit'."""
    with pytest.raises(ValueError, match="not a SLURM duration"):
        parse_duration("7 days")


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [("gres/gpu=16", 16), ("cpu=4,gres/gpu=8,mem=10G", 8), ("gres/gpu:a100=4", None), ("", None)],
)
def test_gpu_count(tres: str, gpus: int | None) -> None:
    """Only an untyped gres/gpu count caps all GPUs."""
    assert gpu_count(tres) == gpus


def test_parse_qos_reads_the_dev_cluster_tiers() -> None:
    """The tiers' priority, MaxWall and per-user GPU cap come out of sacctmgr's rows."""
    qos = parse_qos(QOS_OUTPUT)
    assert qos["high-eur"] == QosInfo("high-eur", 100000, 7 * DAY, 16, None)
    assert qos["low-eur"].max_gpus_per_user is None
    assert qos["low-eur"].max_wall_seconds == 14 * DAY
    assert qos["dev-eur"].max_gpus_per_user == 8
    assert qos["other-eur"].max_wall_seconds is None


def test_parse_assoc_reads_grants_of_every_association() -> None:
    """Each user association gives its account, QoS list and default QoS."""
    assocs = parse_assoc(ASSOC_OUTPUT + "fellows|lab-acct||||normal|\n")
    assert len(assocs) == 2  # the account row without a user is not the user's
    assert assocs[0].account == "lab-acct"
    assert "high-eur" in assocs[0].qos
    assert assocs[0].default_qos == "normal-eur"


def test_discover_runs_two_sacctmgr_calls() -> None:
    """Discovery reads the user's associations and the QoS table, nothing more."""
    runner = _sacctmgr((0, ASSOC_OUTPUT, ""), (0, QOS_OUTPUT, ""))
    grants = discover(runner, "root")
    assert runner.calls == {"sacctmgr": 2}
    assert runner.argvs[0][4:7] == ("assoc", "where", "user=root")
    assert grants.granted == {"dev-eur", "high-eur", "low-eur", "normal", "normal-eur"}


def test_discover_failure_is_a_scheduler_error() -> None:
    """A sacctmgr failure (e.g. slurmdbd down) says which listing failed and SLURM's words."""
    runner = _sacctmgr((1, "", "sacctmgr: error: Problem talking to the database\n"), (0, QOS_OUTPUT, ""))
    with pytest.raises(SchedulerError, match=r"associations of user 'root'.*Problem talking"):
        discover(runner, "root")


def test_ungranted_qos_is_refused_naming_it_and_the_granted_ones() -> None:
    """A ladder rung the user is not granted is a ConfigError naming it and listing what is granted."""
    config = _ladder("high-eur", "other-eur", "low-eur")
    with pytest.raises(ConfigError, match=r"'other-eur'.*not granted.*granted: dev-eur, high-eur, low-eur"):
        check_ladder(config.ladder, _grants(), JobSpec("j", "/j.sh", gpus=8))


def test_all_rungs_kept_for_a_job_that_fits() -> None:
    """An 8-GPU one-day job fits every production rung: nothing skipped, no warning."""
    config = _ladder("high-eur", "normal-eur", "low-eur")
    check = check_ladder(config.ladder, _grants(), JobSpec("j", "/j.sh", gpus=8, time_limit_seconds=DAY))
    assert [r.qos for r in check.rungs] == ["high-eur", "normal-eur", "low-eur"]
    assert check.skipped == ()
    assert check.warnings == ()


def test_rung_with_short_max_wall_is_skipped_with_the_reason() -> None:
    """An 8-day job skips the 7-day rungs, with a message naming MaxWall, and keeps low-eur."""
    config = _ladder("high-eur", "normal-eur", "low-eur", cap=30)
    check = check_ladder(config.ladder, _grants(), JobSpec("j", "/j.sh", gpus=8, time_limit_seconds=8 * DAY))
    assert [r.qos for r in check.rungs] == ["low-eur"]
    assert [s.rung.qos for s in check.skipped] == ["high-eur", "normal-eur"]
    assert "MaxWall 7-00:00:00" in check.skipped[0].why
    assert "8-00:00:00" in check.skipped[0].why
    ladder = check.ladder
    assert ladder.first.qos == "low-eur"
    assert ladder.first.index == 0
    assert ladder.first.park_cap_seconds == 30


def test_rung_with_small_gpu_cap_is_skipped() -> None:
    """A 24-GPU job can never start under a 16-GPU per-user cap: those rungs are skipped."""
    config = _ladder("high-eur", "normal-eur", "low-eur")
    check = check_ladder(config.ladder, _grants(), JobSpec("j", "/j.sh", gpus=24))
    assert [r.qos for r in check.rungs] == ["low-eur"]
    assert "per-user cap of 16" in check.skipped[0].why
    assert check.messages[0].startswith("skipping high-eur")


def test_no_usable_rung_is_a_config_error() -> None:
    """When every rung is skipped, asking for the ladder says why each one cannot work."""
    config = _ladder("high-eur", "normal-eur")
    check = check_ladder(config.ladder, _grants(), JobSpec("j", "/j.sh", gpus=32))
    with pytest.raises(ConfigError, match="no rung of the QoS ladder"):
        _ = check.ladder


def test_qos_group_cap_is_a_warning() -> None:
    """A QoS with a GrpTRES GPU cap is kept but warned about: other users share it."""
    shared = QosInfo("normal-eur", 50000, 7 * DAY, 16, grp_gpus=32)
    check = check_ladder(
        _ladder("high-eur", "normal-eur").ladder,
        _grants(**{"normal-eur": shared}),
        JobSpec("j", "/j.sh", gpus=8),
    )
    assert len(check.rungs) == 2
    assert any("normal-eur has a group GPU cap" in w for w in check.warnings)


def test_association_group_cap_is_a_warning() -> None:
    """An association GrpTRES GPU cap is shared by every rung: walking gains nothing, and the user is told."""
    assoc = Association("c", "lab-acct", "root", "", frozenset({"high-eur", "normal-eur"}), None, grp_gpus=16)
    grants = Grants("root", (assoc,), parse_qos(QOS_OUTPUT))
    check = check_ladder(_ladder("high-eur", "normal-eur").ladder, grants, JobSpec("j", "/j.sh", gpus=8))
    assert any("every rung shares" in w for w in check.warnings)
