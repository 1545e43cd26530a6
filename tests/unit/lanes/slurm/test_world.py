"""``config check``'s look at a SLURM cluster (lanes/slurm/world.py) on the real port over a mock transport: each
problem one line naming the key, the value and the fix; bounded (one attempt, the first silence ends the lane)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from fellows_fsm import FakeScheduler, SystemClock
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.lanes.slurm.lane import default_grants
from fellows_fsm.lanes.slurm.world import SLURM_COMMANDS, bounded, cluster_problems, grant_problems
from fellows_fsm.slurm.accounting import Grants
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import ONE_ATTEMPT
from fellows_fsm.slurm.transport import CommandMissing, NoAnswer, Reply, Request
from tests.unit.cli_helpers import LADDER_GRANTS

ASSOC = "fellows|lab-acct|me||high-eur,normal-eur,low-eur|normal-eur|\n"
QOS = (
    "high-eur|100000|7-00:00:00|gres/gpu=16||\nnormal-eur|50000|7-00:00:00|gres/gpu=16||\n"
    "low-eur|10000|14-00:00:00|||\nother-eur|10000||||\n"
)


def _cluster(*, missing: frozenset[str] = frozenset(), silent: str | None = None) -> Callable[[Request], Reply]:
    """A cluster answering the check's commands: ``missing`` programs are not on PATH, ``silent`` never answers."""

    def handler(request: Request) -> Reply:
        name = os.path.basename(request.argv[0])
        if name in missing:
            raise CommandMissing(f"{name!r} is not installed or not on PATH here (PATH=/usr/local/bin)")
        if name == silent:
            raise NoAnswer(f"no reply within {request.timeout_seconds:g} s", delivered=True)
        if request.argv[1:] == ("--version",):
            return Reply(0, "slurm 22.05.8\n", "", 0.001)
        if name == "scontrol":
            return Reply(0, "PartitionName=gpu Nodes=n1\nPartitionName=debug Nodes=n1\n", "", 0.001)
        if name == "sacctmgr":
            return Reply(0, ASSOC if "assoc" in request.argv else QOS, "", 0.001)
        raise AssertionError(f"unexpected {request.argv}")

    return handler


def _port(runner: MockRunner) -> SlurmScheduler:
    return SlurmScheduler(runner, user="me")


def _check(lane: SlurmSettings, runner: MockRunner) -> list[str]:
    port = bounded(_port(runner))
    return cluster_problems(lane, port, default_grants(port))


def test_a_cluster_that_grants_the_whole_ladder_has_no_problem() -> None:
    """The default ladder on a cluster granting it: no problem; every command's --version and one partition list
    were asked, with ONE attempt each."""
    runner = MockRunner(_cluster())
    assert _check(SlurmSettings(partition="gpu", account="lab-acct"), runner) == []
    assert [a for a in runner.argvs if a[1:] == ("--version",)] == [(c, "--version") for c in SLURM_COMMANDS]
    assert ("scontrol", "-o", "show", "partition") in runner.argvs
    assert runner.retry == ONE_ATTEMPT


def test_a_qos_that_does_not_exist_and_one_not_granted_are_one_line_each() -> None:
    """A QoS the cluster does not have names its key and the cluster's QoS; one it has but does not grant names
    the user and how an admin grants it."""
    lane = SlurmSettings(qos="high-eur", qos_ladder=("normal-euro", "other-eur"))
    problems = _check(lane, MockRunner(_cluster()))
    assert problems == [
        "[fellows] qos_ladder: QoS 'normal-euro' does not exist on the local SLURM (its QoS: high-eur, low-eur, "
        "normal-eur, other-eur); fix the name, or remove it from qos_ladder",
        "[fellows] qos_ladder: QoS 'other-eur' is not granted to 'me' on the local SLURM (granted: high-eur, "
        "low-eur, normal-eur); remove it from qos_ladder, or ask its admins to grant it (sacctmgr modify user me set "
        "qos+=other-eur)",
    ]


def test_debug_qos_partition_and_account_are_checked_too() -> None:
    """debug_qos is judged as a rung; a partition the cluster lacks and an account not the user's are lines of
    their own, each naming the key."""
    lane = SlurmSettings(debug_qos="dev-eur", partition="h100", account="other-acct")
    problems = _check(lane, MockRunner(_cluster()))
    assert len(problems) == 3
    assert problems[0].startswith("[fellows] debug_qos: QoS 'dev-eur' does not exist on the local SLURM")
    assert problems[1].startswith("[fellows] partition='h100' does not exist on that cluster (its partitions: debug")
    assert problems[2].startswith("[fellows] account='other-acct' is not an account of user 'me'")


def test_missing_commands_are_named_with_path_and_nothing_more_is_asked() -> None:
    """Each SLURM command not found is its own line naming it and PATH; the controller and grants are not asked."""
    runner = MockRunner(_cluster(missing=frozenset({"sbatch", "sacctmgr"})))
    problems = _check(SlurmSettings(), runner)
    assert len(problems) == 2
    assert all("PATH=/usr/local/bin" in p for p in problems)
    assert "'sbatch'" in problems[0]
    assert "'sacctmgr'" in problems[1]
    assert all(a[1:] == ("--version",) for a in runner.argvs)


@pytest.mark.parametrize("silent", ["scontrol", "sbatch"])
def test_a_silent_cluster_costs_one_timeout_and_ends_the_lanes_check(silent: str) -> None:
    """The first command the cluster does not answer ends this lane's check in one line saying so and what to fix;
    it is tried once, never with back-off."""
    runner = MockRunner(_cluster(silent=silent))
    problems = _check(SlurmSettings(), runner)
    [line] = problems
    assert line.startswith("[fellows] the local SLURM does not answer (")
    assert "fix SLURM_CONF or slurm_conf" in line
    assert runner.calls[silent] == 1
    assert runner.slept == []
    assert not any(a[0] == "sacctmgr" and "show" in a for a in runner.argvs)


def test_a_remote_lane_names_its_host_and_ssh_keys() -> None:
    """A lane over ssh that does not answer names its host and the keys to fix (host, ssh_options)."""
    lane = SlurmSettings(name="inst", host="inst-cluster")
    [line] = _check(lane, MockRunner(_cluster(silent="sbatch"), remote=True))
    assert line.startswith("[lanes.inst] inst-cluster (over ssh) does not answer")
    assert "fix host/ssh_options" in line


def test_grants_without_an_association_say_so_once() -> None:
    """A user with no association on the cluster is told so once (not once per rung as 'not granted')."""
    empty = Grants(user="me", associations=(), qos=LADDER_GRANTS.qos)
    [line] = grant_problems(SlurmSettings(qos="high-eur", qos_ladder=("normal-eur",)), empty)
    assert line.startswith("[fellows] user 'me' has no association on the local SLURM")


def test_a_fake_port_is_judged_on_the_grants_given() -> None:
    """A port with no commands to ask (a fake) is judged on the grants read for it alone."""
    lane = SlurmSettings(qos_ladder=("normal-eur", "nope"))
    problems = cluster_problems(lane, FakeScheduler(SystemClock()), lambda: LADDER_GRANTS)
    [line] = problems
    assert "qos_ladder: QoS 'nope' does not exist" in line
