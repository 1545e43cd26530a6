"""The config file (config/file.py), its top level: the lanes' auto order, a TOML error naming the file, the table,
the key and the value, and allow_network_state_dir. Config validation: every bad value is refused at build time with
a message naming it (the ladder's table: test_fellows.py; the lanes': test_lanes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm import ConfigError
from fellows_fsm.config.file import Config, load_config
from fellows_fsm.lanes.command.config import CommandSettings


def test_default_auto_order_includes_gcp_only_when_configured(tmp_path: Path) -> None:
    """Without a [lanes.gcp] table the auto order is fellows alone; with one, fellows then gcp."""
    assert Config(state_dir=tmp_path).auto_order == ("fellows",)
    gcp = CommandSettings(name="gcp", command=("gcloud", "batch", "jobs", "submit", "fsm-{dispatch_id}"))
    assert Config(lanes=(gcp,), state_dir=tmp_path).auto_order == ("fellows", "gcp")


def test_toml_errors_name_the_file_and_key(tmp_path: Path) -> None:
    """A TOML file with a bad value is refused naming the file, the table, the key and the value."""
    path = tmp_path / "fellows.toml"
    path.write_text('[fellows]\nqos_ladder = ["normal-eur", "high-eur"]\n')
    with pytest.raises(ConfigError, match=rf"{path}: \[fellows\]: qos_ladder=\['normal-eur', 'high-eur'\] repeats"):
        load_config(path)
    path.write_text("[fellows\n")
    with pytest.raises(ConfigError, match=rf"{path}: not valid TOML"):
        load_config(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_allow_network_state_dir_must_be_a_boolean() -> None:
    """allow_network_state_dir takes true or false only."""
    assert Config.from_mapping({"allow_network_state_dir": True}).allow_network_state_dir is True
    with pytest.raises(ConfigError, match="must be true or false"):
        Config.from_mapping({"allow_network_state_dir": "yes"})


def test_the_config_says_which_lane_comes_after_which_and_what_each_is() -> None:
    """``following`` walks ``[router] order`` one lane at a time (None after the last), and ``lane_named`` finds
    any lane, the ladder's included, by its name (None for a name no table has)."""
    config = Config.from_mapping(
        {
            "lanes": {"gcp": {"command": ["gcloud", "{dispatch_id}"]}, "sky": {"command": ["sky", "{dispatch_id}"]}},
            "router": {"order": ["fellows", "sky", "gcp"]},
        }
    )
    assert [config.following(name) for name in config.auto_order] == ["sky", "gcp", None]
    assert config.following("runpod") is None
    ladder, sky = config.lane_named("fellows"), config.lane_named("sky")
    assert ladder is config.fellows
    assert ladder.walks_ladder
    assert sky is not None
    assert (sky.kind, sky.walks_ladder) == ("command", False)
    assert config.lane_named("runpod") is None
