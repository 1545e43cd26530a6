"""``fellows-fsm init``'s first config (config/starter.py) and the config search order (config/discover.py), with
grants given as values and the command run in-process with its seams replaced."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fellows_fsm.config.discover import find_config, user_config_path
from fellows_fsm.config.file import Config, load_config
from fellows_fsm.config.starter import is_debug_qos, starter, starter_toml
from fellows_fsm.errors import ConfigError
from fellows_fsm.slurm.accounting import Association, Grants, QosInfo
from fellows_fsm.ui import app
from tests.unit.cli_helpers import run

GRANTED = ("normal", "high-eur", "normal-eur", "low-eur", "dev-eur")


def _grants(granted: tuple[str, ...] = GRANTED, partition: str = "") -> Grants:
    """The local cluster's QoS (scripts/dev-slurm's tiers) with ``granted`` granted to user ada."""
    qos = {
        "normal": QosInfo("normal", 0),
        "high-eur": QosInfo("high-eur", 100000, max_wall_seconds=7 * 86400, max_gpus_per_user=16),
        "normal-eur": QosInfo("normal-eur", 50000, max_gpus_per_user=16),
        "low-eur": QosInfo("low-eur", 10000),
        "dev-eur": QosInfo("dev-eur", 200000, max_gpus_per_user=8),
        "other-eur": QosInfo("other-eur", 10000),
    }
    assoc = Association("c", "lab-acct", "ada", partition, frozenset(granted), "normal-eur")
    return Grants("ada", (assoc,), qos, frozenset({"gpu", "cpu"}))


@pytest.mark.parametrize(
    ("name", "debug"),
    [("dev-eur", True), ("debug", True), ("gpu_test", True), ("high-eur", False), ("developer", False)],
    ids=["dev-eur", "debug", "gpu_test", "high-eur", "developer"],
)
def test_debug_qos_are_told_by_their_name(name: str, debug: bool) -> None:
    """A QoS named for debugging (a dev/debug/test word) is a debug QoS; other names are rungs."""
    assert is_debug_qos(name) is debug


def test_the_ladder_is_the_granted_non_debug_qos_best_first() -> None:
    """The ladder is every granted non-debug QoS by priority, the debug one apart, SLURM's priority-0 one left out."""
    chosen = starter(_grants())
    assert chosen.ladder == ("high-eur", "normal-eur", "low-eur")
    assert chosen.debug_qos == "dev-eur"
    assert chosen.left_out == ("normal",)
    assert chosen.account == "lab-acct"


def test_the_first_rung_named_by_the_user_starts_the_ladder() -> None:
    """--qos names the first rung; only QoS of no higher priority follow it."""
    assert starter(_grants(), first="normal-eur").ladder == ("normal-eur", "low-eur")


def test_a_qos_not_granted_is_refused_naming_what_is() -> None:
    """--qos of a QoS the user is not granted is a ConfigError listing the granted ones."""
    with pytest.raises(ConfigError, match=r"'other-eur' is not granted.*dev-eur, high-eur"):
        starter(_grants(), first="other-eur")


def test_no_debug_qos_and_the_association_partition() -> None:
    """Without a debug QoS none is set; the association's partition is the config's."""
    chosen = starter(_grants(("high-eur", "low-eur"), partition="gpu"))
    assert (chosen.ladder, chosen.debug_qos, chosen.partition) == (("high-eur", "low-eur"), None, "gpu")


def test_the_written_config_loads_with_the_chosen_values(tmp_path: Path) -> None:
    """The text loads as a Config: the ladder, debug QoS, host; paid lane and [budget] only in comments."""
    grants = _grants()
    text = starter_toml(starter(grants), grants, host="ada@login", written_by="fellows-fsm init")
    config = Config.from_mapping(tomllib.loads(text))
    assert config.fellows.ladder.qos_names == ("high-eur", "normal-eur", "low-eur")
    assert (config.fellows.debug_qos, config.fellows.host) == ("dev-eur", "ada@login")
    assert config.lanes == ()
    assert not config.budget.limited
    assert "# [budget]" in text
    assert '# kind = "gcp-batch"' in text


def test_the_config_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--config, then $FELLOWS_FSM_CONFIG, then ./fellows.toml, then the user's config dir; else the defaults."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FELLOWS_FSM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert find_config().how == "defaults"
    user = user_config_path()
    assert user == tmp_path / "xdg" / "fellows-fsm" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[fellows]\nqos = "normal-eur"\nqos_ladder = []\n')
    assert (find_config().path, load_config().fellows.qos) == (user, "normal-eur")
    (tmp_path / "fellows.toml").write_text('[fellows]\nqos = "low-eur"\nqos_ladder = []\n')
    assert load_config().fellows.qos == "low-eur"
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(user))
    assert load_config().fellows.qos == "normal-eur"
    assert find_config(tmp_path / "fellows.toml").how == "--config"


def test_init_writes_the_user_config_once_and_config_path_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """init writes $XDG_CONFIG_HOME/fellows-fsm/config.toml, refuses to write over it (exit 3) without --force, and
    config path then names it and its journal from any directory."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FELLOWS_FSM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("FELLOWS_FSM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app, "make_lane_scheduler", lambda config, lane: object())
    monkeypatch.setattr(app, "read_grants", lambda port: _grants())
    first = run("init")
    assert first.exit_code == 0, first.output
    written = tmp_path / "xdg" / "fellows-fsm" / "config.toml"
    assert f"wrote {written}: ladder high-eur -> normal-eur -> low-eur; debug QoS dev-eur" in first.stdout
    before = written.read_text()
    again = run("init", "--qos", "low-eur")
    assert again.exit_code == 3
    assert "exists; `fellows-fsm init --force`" in again.stderr
    assert written.read_text() == before
    forced = run("init", "--qos", "low-eur", "--force")
    assert forced.exit_code == 0, forced.output
    assert load_config().fellows.qos == "low-eur"
    where = run("config", "path")
    assert where.exit_code == 0, where.output
    assert f"config: {written} (the user config)" in where.stdout
    assert f"journal: {tmp_path / 'state' / 'journal.sqlite3'}" in where.stdout


def test_status_from_another_directory_names_the_user_config_and_its_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a directory without fellows.toml, status reads the user's config and names it and its journal."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FELLOWS_FSM_CONFIG", raising=False)
    monkeypatch.delenv("FELLOWS_FSM_STATE_DIR", raising=False)
    user = user_config_path()
    user.parent.mkdir(parents=True)
    user.write_text(f'state_dir = "{tmp_path / "mine"}"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    said = run("status")
    assert said.exit_code == 0, said.output
    journal = tmp_path / "mine" / "journal.sqlite3"
    assert f"no dispatches in {journal} (config {user} · journal {journal})" in said.stdout
