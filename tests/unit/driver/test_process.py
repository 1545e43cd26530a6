"""The background driver's process (driver/process.py): one journal, one cluster (issue 29, case 12): a config
reaching another cluster is refused while the journal has live dispatches."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from fellows_fsm import ConfigError, JobSpec, SlurmSettings
from fellows_fsm.config.file import Config
from fellows_fsm.driver.inbox import check_cluster, enqueue, remember_config
from fellows_fsm.journal.store import Journal
from tests.unit.conftest import CAP

LOCAL = SlurmSettings(park_cap_seconds=CAP)
SSH = SlurmSettings(park_cap_seconds=CAP, host="login.example.org", remote_workdir="/scratch/me")


def _on(tmp_path: Path, fellows: SlurmSettings, source: str) -> Config:
    return Config(fellows=fellows, state_dir=tmp_path, source=source)


@pytest.mark.parametrize(("first", "second"), [(LOCAL, SSH), (SSH, LOCAL)], ids=["local-then-ssh", "ssh-then-local"])
def test_a_config_reaching_another_cluster_is_refused_while_the_journal_has_live_dispatches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: SlurmSettings, second: SlurmSettings
) -> None:
    """A journal with a live dispatch submitted through one config refuses, in one line naming both, a config that
    reaches another cluster or transport; the journaled driver config is left as it was."""
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    one, two = _on(tmp_path, first, "one.toml"), _on(tmp_path, second, "two.toml")
    with closing(Journal(one.journal_path)) as journal:
        remember_config(one, journal)
        enqueue(one, journal, JobSpec(name="train", script="train.sbatch", gpus=8))
        with pytest.raises(ConfigError, match=r"one\.toml.*two\.toml") as refused:
            remember_config(two, journal)
        assert "\n" not in str(refused.value)
        assert journal.get_meta("driver-config")["source"] == "one.toml"


def test_a_local_config_with_another_slurm_conf_is_another_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two local configs whose SLURM_CONF differ reach two clusters: the second is refused while one is live."""
    config = _on(tmp_path, LOCAL, "fellows.toml")
    with closing(Journal(config.journal_path)) as journal:
        monkeypatch.setenv("SLURM_CONF", "/clusters/a/slurm.conf")
        remember_config(config, journal)
        enqueue(config, journal, JobSpec(name="train", script="train.sbatch", gpus=8))
        monkeypatch.setenv("SLURM_CONF", "/clusters/b/slurm.conf")
        with pytest.raises(ConfigError, match=r"SLURM_CONF=/clusters/a/slurm\.conf"):
            check_cluster(config, journal)


def test_the_same_cluster_or_an_idle_journal_takes_the_new_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another config on the same cluster (other caps) is taken, as is any config once nothing is live."""
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    one = _on(tmp_path, LOCAL, "one.toml")
    other_caps = _on(tmp_path, SlurmSettings(park_cap_seconds=2 * CAP), "caps.toml")
    with closing(Journal(one.journal_path)) as journal:
        remember_config(one, journal)
        remember_config(_on(tmp_path, SSH, "ssh.toml"), journal)  # nothing live: the journal takes it
        assert journal.get_meta("driver-config")["source"] == "ssh.toml"
        remember_config(one, journal)
        enqueue(one, journal, JobSpec(name="train", script="train.sbatch", gpus=8))
        remember_config(other_caps, journal)
        assert journal.get_meta("driver-config")["source"] == "caps.toml"
