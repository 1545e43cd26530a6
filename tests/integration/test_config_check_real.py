"""``fellows-fsm config check`` checks the world on the real local SLURM (issue 41 item 4): a QoS of the ladder that
does not exist, one that exists but is not granted, SLURM's commands not on PATH, a command lane's program missing,
and a second cluster over its own sshd, reachable and not; one line per problem and exit 3, ``--offline`` the file
alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .cli_harness import cli, ledger_config
from .conftest import Cluster
from .two_clusters import SecondCluster

pytestmark = pytest.mark.slurm


def _errors(stderr: str) -> list[str]:
    return [line.removeprefix("fellows-fsm: error: ") for line in stderr.splitlines() if " error: " in line]


def test_a_config_the_cluster_grants_is_ok(slurm: Cluster, tmp_path: Path) -> None:
    """The default ladder with debug_qos, all granted on the local cluster: exit 0 and config OK."""
    config = ledger_config(tmp_path, cap=60, poll=1, fellows='debug_qos = "dev-eur"\n')
    result = cli(config, "config", "check", timeout=60)
    assert result.returncode == 0, result.stderr
    assert _errors(result.stderr) == []
    assert "config OK: 1 SLURM cluster(s) answer" in " ".join(result.stdout.split())


def test_a_qos_that_does_not_exist_and_one_not_granted_exit_3(slurm: Cluster, tmp_path: Path) -> None:
    """qos_ladder with 'nope-eur' (no such QoS) and 'other-eur' (exists, not granted to the user): one line each,
    naming the key, the value and the fix, exit 3; --offline says the file is fine."""
    ladder = 'qos = "high-eur"\nqos_ladder = ["normal-eur", "nope-eur", "other-eur"]\n'
    config = ledger_config(tmp_path, cap=60, poll=1, fellows=ladder)
    result = cli(config, "config", "check", timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    errors = _errors(result.stderr)
    assert len(errors) == 2, errors
    assert errors[0].startswith("[fellows] qos_ladder: QoS 'nope-eur' does not exist on the local SLURM (its QoS: ")
    assert errors[0].endswith("fix the name, or remove it from qos_ladder")
    assert errors[1].startswith("[fellows] qos_ladder: QoS 'other-eur' is not granted to ")
    assert "sacctmgr modify user" in errors[1]
    assert "config OK" not in result.stdout
    offline = cli(config, "config", "check", "--offline", timeout=60)
    assert offline.returncode == 0, offline.stderr
    assert "config OK" in offline.stdout


def test_slurm_commands_not_on_path_are_named_with_the_path(slurm: Cluster, tmp_path: Path) -> None:
    """A shell whose PATH lacks SLURM (a forgotten `module load`): each SLURM command is a line naming it and the
    PATH it was looked for on, exit 3."""
    config = ledger_config(tmp_path, cap=60, poll=1)
    bare = str(tmp_path / "bin")  # no SLURM here; the console script is run by its full path
    result = cli(config, "config", "check", timeout=60, env={**os.environ, "PATH": bare})
    assert result.returncode == 3, result.stdout + result.stderr
    errors = _errors(result.stderr)
    named = [e for e in errors if e.startswith("[fellows] the local SLURM: the SLURM command ")]
    assert len(named) == 6, errors
    assert all(f"PATH={bare}" in e for e in named)


def test_a_command_lane_whose_program_is_missing_exit_3(slurm: Cluster, tmp_path: Path) -> None:
    """A command lane whose program is not on PATH: one line naming the lane, the key and the program, exit 3."""
    lane = 'command = ["no-such-gcloud-xyz", "batch", "{dispatch_id}"]\n'
    config = ledger_config(tmp_path, cap=60, poll=1, lane=lane)
    result = cli(config, "config", "check", timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    assert _errors(result.stderr) == [
        "[lanes.gcp] command: 'no-such-gcloud-xyz' is not found on PATH here; the handoff fails unless it exists "
        "where fellows-fsm runs the dispatch"
    ]


def _two_clusters(tmp_path: Path, second: SecondCluster, *, ladder: str = "") -> Path:
    config = ledger_config(tmp_path, cap=60, poll=1, router='order = ["fellows", "inst", "gcp"]\n')
    lane = second.lane_toml(extra=ladder)
    config.write_text(config.read_text(encoding="utf-8") + "\n" + lane, encoding="utf-8")
    return config


def test_a_second_cluster_over_ssh_is_checked_there(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """The inst cluster over its sshd: its ladder granted, exit 0 (2 clusters); a QoS it has but does not grant
    ('inst-other') is a line naming inst-cluster, exit 3."""
    ok = cli(_two_clusters(tmp_path, second_slurm), "config", "check", timeout=90)
    assert ok.returncode == 0, ok.stderr
    assert "config OK: 2 SLURM cluster(s) answer" in " ".join(ok.stdout.split())
    other = tmp_path / "other"
    other.mkdir()
    config = _two_clusters(other, second_slurm)
    text = config.read_text(encoding="utf-8").replace(
        f'qos_ladder = ["{second_slurm.qos_ladder[1]}"]',
        f'qos_ladder = ["{second_slurm.qos_ladder[1]}", "{second_slurm.ungranted_qos}"]',
    )
    config.write_text(text, encoding="utf-8")
    bad = cli(config, "config", "check", timeout=90)
    assert bad.returncode == 3, bad.stdout + bad.stderr
    [line] = _errors(bad.stderr)
    assert line.startswith(f"[lanes.inst] qos_ladder: QoS '{second_slurm.ungranted_qos}' is not granted to ")
    assert f" on {second_slurm.host} (over ssh) (granted: " in line


def test_an_unreachable_second_cluster_is_one_line_and_no_hang(
    slurm: Cluster, second_slurm: SecondCluster, tmp_path: Path
) -> None:
    """The inst sshd down: config check says in one line that inst-cluster does not answer and what to fix, exit 3
    (the first cluster is checked as usual, side by side); it ends by itself (the run's own timeout would fail it)."""
    config = _two_clusters(tmp_path, second_slurm)
    with second_slurm.sshd_stopped():
        result = cli(config, "config", "check", timeout=90)
    assert result.returncode == 3, result.stdout + result.stderr
    [line] = _errors(result.stderr)
    assert line.startswith(f"[lanes.inst] {second_slurm.host} (over ssh) does not answer (")
    assert line.endswith("fix host/ssh_options, or take the lane out of [router] order")
