"""The fellows ladder's table (lanes/slurm/config.py): the ladder and its worst case, the park caps (and their
environment default), every bad value refused naming it, the ssh settings."""

from __future__ import annotations

import math

import pytest

from fellows_fsm import ConfigError, SlurmSettings
from fellows_fsm.config.file import Config
from fellows_fsm.lanes.slurm.config import PARK_CAP_ENV


def test_default_ladder_and_worst_case() -> None:
    """The default config walks high-eur, normal-eur, low-eur at 600 s each: 1800 s before GCP."""
    config = SlurmSettings(park_cap_seconds=600)
    assert config.ladder.qos_names == ("high-eur", "normal-eur", "low-eur")
    assert [r.label for r in config.ladder.rungs] == [
        "SUBMITTED(high-eur)", "RESUBMITTED(normal-eur)", "RESUBMITTED(low-eur)",
    ]  # fmt: skip
    assert config.worst_case_seconds == 1800


def test_later_rungs_may_have_a_shorter_cap() -> None:
    """later_park_cap_seconds applies to rungs 2+, and the worst case is the sum of the real caps."""
    config = SlurmSettings(park_cap_seconds=600, later_park_cap_seconds=120)
    assert [r.park_cap_seconds for r in config.ladder.rungs] == [600, 120, 120]
    assert config.worst_case_seconds == 840


def test_park_cap_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """EPS_FELLOWS_QUEUE_WAIT_SECONDS sets the default cap; unset it is 600 s."""
    monkeypatch.setenv(PARK_CAP_ENV, "45")
    assert SlurmSettings().park_cap_seconds == 45
    monkeypatch.delenv(PARK_CAP_ENV)
    assert SlurmSettings().park_cap_seconds == 600


@pytest.mark.parametrize("raw", ["abc", "-5", "0", "nan", "inf"])
def test_bad_environment_cap_is_named(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    """A bad EPS_FELLOWS_QUEUE_WAIT_SECONDS is refused with the variable's name and its value."""
    monkeypatch.setenv(PARK_CAP_ENV, raw)
    with pytest.raises(ConfigError, match=rf"{PARK_CAP_ENV}.*{raw}"):
        SlurmSettings()


BAD = [
    ({"qos_ladder": ["high-eur", "normal-eur"]}, r"repeats qos='high-eur'.*remove 'high-eur' from it"),
    ({"qos_ladder": ["normal-eur", "low-eur", "normal-eur"]}, r"lists 'normal-eur' twice"),
    ({"qos_ladder": "normal-eur"}, r"qos_ladder='normal-eur' must be a list"),
    ({"qos_ladder": ["normal-eur", "bad qos"]}, r"qos_ladder\[1\]='bad qos' is not a QoS name"),
    ({"park_cap_seconds": 1e12}, r"park_cap_seconds=1000000000000.0 is over the maximum of 2.592e\+06 seconds"),
    ({"park_cap_seconds": 1e300}, r"park_cap_seconds=1e\+300 is over the maximum"),
    ({"poll_interval_seconds": 0.000001}, r"poll_interval_seconds=1e-06 is under the minimum of 0.05 seconds"),
    ({"poll_interval_seconds": 86400}, r"poll_interval_seconds=86400 is over the maximum of 3600 seconds"),
    ({"park_cap_seconds": 0}, r"park_cap_seconds=0 must be a positive"),
    ({"park_cap_seconds": -1.5}, r"park_cap_seconds=-1.5 must be a positive"),
    ({"park_cap_seconds": math.nan}, r"park_cap_seconds=nan must be a positive, finite"),
    ({"park_cap_seconds": math.inf}, r"park_cap_seconds=inf must be a positive, finite"),
    ({"park_cap_seconds": "600"}, r"park_cap_seconds='600' is not a number"),
    ({"park_cap_seconds": True}, r"park_cap_seconds=True is not a number"),
    ({"later_park_cap_seconds": -3}, r"later_park_cap_seconds=-3 must be a positive"),
    ({"poll_interval_seconds": 0}, r"poll_interval_seconds=0 must be a positive"),
    ({"debug_qos": "high-eur"}, r"debug_qos='high-eur' is also on the ladder"),
    ({"debug_name_prefix": "D _"}, r"debug_name_prefix='D _'"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD, ids=[f"{k}={v!r}" for kw, _ in BAD for k, v in kw.items()])
def test_bad_values_are_refused_with_their_value(kwargs: dict[str, object], message: str) -> None:
    """Each invalid config value raises ConfigError whose message names the key and the bad value."""
    with pytest.raises(ConfigError, match=message):
        SlurmSettings(**{"park_cap_seconds": 600, **kwargs})  # type: ignore[arg-type]


def test_from_mapping_names_the_table_and_unknown_keys() -> None:
    """A TOML table with an unknown key is refused, naming the table, the key and the known keys."""
    with pytest.raises(ConfigError, match=r"\[fellows\]: unknown key 'park_cap'.*park_cap_seconds"):
        SlurmSettings.from_mapping({"park_cap": 5})
    with pytest.raises(ConfigError, match=r"\[fellows\]: park_cap_seconds=-1"):
        SlurmSettings.from_mapping({"park_cap_seconds": -1})
    assert SlurmSettings.from_mapping({"park_cap_seconds": 5, "qos_ladder": []}).worst_case_seconds == 5


def test_unknown_intent_is_refused() -> None:
    """ladder_for refuses an intent other than prod or debug, naming it."""
    with pytest.raises(ConfigError, match="intent='batch'"):
        SlurmSettings(park_cap_seconds=600).ladder_for("batch")


def test_config_is_frozen() -> None:
    """A built config cannot be changed afterwards (it is a value)."""
    config = SlurmSettings(park_cap_seconds=600)
    with pytest.raises(AttributeError):
        config.park_cap_seconds = 1  # type: ignore[misc]


def test_host_and_ssh_options_are_read_from_fellows() -> None:
    """[fellows] host, ssh_options and remote_workdir reach the config as given."""
    config = Config.from_mapping(
        {"fellows": {"host": "ssh://me@login:2222", "ssh_options": ["-J", "bastion"], "remote_workdir": "/scratch"}}
    )
    assert (config.fellows.host, config.fellows.ssh_options, config.fellows.remote_workdir) == (
        "ssh://me@login:2222",
        ("-J", "bastion"),
        "/scratch",
    )


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"ssh_options": ["-F", "x"]}, "without host"),
        ({"host": "login", "ssh_options": "-F x"}, "must be a list of ssh arguments"),
        ({"host": "login", "remote_workdir": "jobs"}, "must be an absolute path"),
        ({"host": "-oProxyCommand=touch /tmp/x"}, "is not an ssh destination"),
    ],
    ids=["options-without-host", "options-as-string", "relative-workdir", "option-as-host"],
)
def test_bad_ssh_settings_are_refused_naming_the_key(table: dict[str, object], words: str) -> None:
    """ssh settings that cannot work are a ConfigError naming the key and the value."""
    with pytest.raises(ConfigError, match=words):
        Config.from_mapping({"fellows": table})
