"""Bad input in a SLURM lane's table (issue 26 "Bad input"): each is refused when the config is read, in one line
naming the lane's table and the key, so nothing can be queued with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.config.file import Config
from fellows_fsm.errors import ConfigError
from tests.unit.cli_helpers import SchedulingFake, _toml, one_error_line, run, world

INST: dict[str, Any] = {"kind": "slurm", "qos": "inst-high", "host": "inst-login"}


def _refusal(lane: dict[str, Any], *, name: str = "inst") -> str:
    """The one-line refusal of a config with this lane table (``[fellows]`` when ``name`` is fellows)."""
    tables = {"fellows": lane} if name == "fellows" else {"lanes": {name: lane}}
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping(tables, source="fellows.toml")
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        pytest.param("gres", "gpu:{gpu}", "the unknown placeholder {gpu}", id="gres-gpu"),
        pytest.param("gres", "gpu:a100:{count}", "the unknown placeholder {count}", id="gres-count"),
        pytest.param("gres", "gpu:{gpus}{gpus}", "{gpus} 2 times", id="gres-twice"),
        pytest.param("gres", "gpu:a100:8", "no placeholder {gpus}", id="gres-none"),
        pytest.param("gres", "gpu:{gpus} --hold", "only letters, digits", id="gres-space"),
        pytest.param("gres", 8, "is not a string", id="gres-number"),
        pytest.param("gpus_per_node", "{gpu}", "the unknown placeholder {gpu}", id="gpn-gpu"),
        pytest.param("gpus_per_node", "h200:{gpus}{gpus}", "{gpus} 2 times", id="gpn-twice"),
    ],
)
def test_a_bad_gpu_template_is_one_line_naming_lane_key_and_fault(key: str, value: object, words: str) -> None:
    """A gres or gpus_per_node template with an unknown, missing or repeated placeholder names the lane and key."""
    message = _refusal({**INST, key: value})
    assert message.startswith("fellows.toml: [lanes.inst]: ")
    assert f"{key}={value!r}" in message
    assert words in message
    assert "e.g." in message


def test_gres_and_gpus_per_node_both_set_is_refused() -> None:
    """A lane writing its GPU request two ways is refused, naming the lane and both keys."""
    message = _refusal({**INST, "gres": "gpu:{gpus}", "gpus_per_node": "{gpus}"})
    assert message.startswith("fellows.toml: [lanes.inst]: ")
    assert "gres='gpu:{gpus}'" in message
    assert "gpus_per_node='{gpus}'" in message
    assert "keep one" in message


@pytest.mark.parametrize("key", ["partition", "account"])
@pytest.mark.parametrize(
    "value", ["h200 gpu", "x;rm -rf ~", "-p", "", 7], ids=["space", "shell", "dash", "empty", "int"]
)
def test_a_bad_partition_or_account_name_is_refused(key: str, value: object) -> None:
    """A partition or account that is no SLURM name (it could be an option or a word list) names lane and key."""
    message = _refusal({**INST, key: value})
    assert message.startswith("fellows.toml: [lanes.inst]: ")
    assert f"{key}={value!r} is not a SLURM {key} name" in message


def test_a_slurm_lane_with_no_way_to_reach_it_is_refused() -> None:
    """A SLURM lane with neither host nor slurm_conf names the lane and both keys it may give."""
    message = _refusal({"kind": "slurm", "qos": "inst-high", "partition": "h200"})
    assert message.startswith("fellows.toml: [lanes.inst]: no way to reach this cluster")
    assert "host" in message
    assert "slurm_conf" in message


def test_the_fellows_table_names_itself_in_the_same_refusals() -> None:
    """[fellows] takes the same cluster keys and its refusals name [fellows]."""
    message = _refusal({"gres": "gpu:{gpu}"}, name="fellows")
    assert message.startswith("fellows.toml: [fellows]: gres='gpu:{gpu}' has the unknown placeholder {gpu}")


@pytest.mark.parametrize(
    ("lines", "key"),
    [
        pytest.param('gres = "gpu:{gpu}"', "gres", id="gres-placeholder"),
        pytest.param('gres = "gpu:{gpus}"\ngpus_per_node = "{gpus}"', "gpus_per_node", id="gres-and-gpus-per-node"),
        pytest.param('partition = "h200 gpu"', "partition", id="partition"),
        pytest.param('account = "-x"', "account", id="account"),
    ],
)
def test_submit_with_a_bad_slurm_lane_is_one_line_and_queues_nothing(
    env: Path, scheduling_fake: SchedulingFake, script: Path, lines: str, key: str
) -> None:
    """`submit` under a config whose SLURM lane has a bad key exits 3 with one line naming the lane and the key, and
    leaves the journal, the queue and the paid lane untouched."""
    lane = f'\n[lanes.inst]\nkind = "slurm"\nqos = "inst-high"\nhost = "inst-login"\n{lines}\n'
    (env / "fellows.toml").write_text(_toml(env, router='order = ["fellows", "inst", "gcp"]') + lane)
    before = world(env, scheduling_fake)
    result = run("submit", str(script))
    assert result.exit_code == 3, result.output
    line = one_error_line(result)
    assert "[lanes.inst]: " in line
    assert f"{key}=" in line
    assert world(env, scheduling_fake) == before
