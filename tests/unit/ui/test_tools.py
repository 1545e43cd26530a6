"""The commands around the dispatch in ui/tools.py: config check (and the config errors it reports), diagram
and demo, through the entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm.config.file import load_config
from fellows_fsm.lanes.slurm.config import FellowsConfig
from fellows_fsm.ui.diagram import mermaid, spine_mermaid, state_diagram_page
from tests.unit.cli_helpers import SchedulingFake, _toml, one_error_line, refused, run, world


def test_config_check_prints_ladder_caps_lanes_and_worst_case(env: Path) -> None:
    """config check exits 0 and prints the rungs with their caps, the lanes and the worst case."""
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    for word in ("high-eur", "normal-eur", "low-eur", "gcp", "worst case", "config OK"):
        assert word in result.stdout


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('[fellows]\npark_cap_seconds = "ten"\n', ["fellows.toml", "park_cap_seconds", "'ten'"]),
        ("[fellows]\nqos_ladder = ['high-eur', 'low-eur']\n", ["fellows.toml", "qos_ladder", "'high-eur'", "remove"]),
        ("[fellows\n", ["fellows.toml", "not valid TOML"]),
        ("[fellows]\nbogus = 1\n", ["fellows.toml", "unknown key 'bogus'"]),
    ],
    ids=["not-a-number", "ladder-repeats-qos", "bad-toml", "unknown-key"],
)
def test_config_errors_exit_3_naming_file_key_and_value(env: Path, toml: str, words: list[str]) -> None:
    """A wrong config exits 3 with one line naming the file, the key and the bad value."""
    (env / "fellows.toml").write_text(toml)
    result = run("config", "check")
    assert result.exit_code == 3
    line = one_error_line(result)
    for word in words:
        assert word in line


BAD_CONFIGS = [
    ({"fellows": "qos_ladder = ['high-eur', 'normal-eur']"}, ["qos_ladder", "repeats qos='high-eur'", "remove"]),
    ({"gcp": "['gcloud', 'fsm-{dispatch_id']"}, ["[lanes.gcp] command", "'fsm-{dispatch_id'"]),
    ({"fellows": "park_cap_seconds = 1e12"}, ["park_cap_seconds=1000000000000.0", "maximum"]),
    ({"fellows": "park_cap_seconds = 1e300"}, ["park_cap_seconds=1e+300", "maximum"]),
    ({"fellows": "poll_interval_seconds = 0.000001"}, ["poll_interval_seconds=1e-06", "minimum"]),
    ({"router": "order = ['fellows', 'gcp', 'gcp']"}, ["order=", "'gcp' twice"]),
    ({"gcp": "['sh', '-c', 'sky launch {job_name}']"}, ["[lanes.gcp] command", "{job_name}", "$FSM_JOB_NAME"]),
    ({"gcp": "['/bin/bash', '-ec', 'echo {script}']"}, ["[lanes.gcp] command", "{script}", "$FSM_SCRIPT"]),
    ({"top": "state_dir = 5"}, ["state_dir=5"]),
]


@pytest.mark.parametrize(
    ("parts", "words"),
    BAD_CONFIGS,
    ids=[
        "ladder-repeats-qos",
        "unclosed-placeholder",
        "park-cap-1e12",
        "park-cap-1e300",
        "poll-one-microsecond",
        "order-lists-gcp-twice",
        "placeholder-in-sh-c",
        "placeholder-in-bash-ec",
        "state-dir-not-a-path",
    ],
)
def test_bad_config_is_refused_by_check_and_by_submit(
    env: Path, scheduling_fake: SchedulingFake, script: Path, parts: dict[str, str], words: list[str]
) -> None:
    """config check and submit both exit 3 with one line naming the bad value; submit queues nothing."""
    scheduling_fake.scheduling = False
    # A journal with one dispatch in it, pinned so no driver's tick moves it while the refusals are made (a walking
    # one parked between the two snapshots on a loaded machine).
    assert run("submit", "--detach", "--pin", "fellows", str(script)).exit_code == 0
    before = world(env, scheduling_fake)
    if "top" in parts:  # a second state_dir key would be a TOML error: replace the first one
        text = _toml(env, **{k: v for k, v in parts.items() if k != "top"})
        text = text.replace(f'state_dir = "{env / "state"}"', parts["top"])
    else:
        text = _toml(env, **parts)
    (env / "fellows.toml").write_text(text)
    refused(run("config", "check"), 3, "fellows.toml", *words)
    refused(run("submit", str(script)), 3, *words)
    assert world(env, scheduling_fake) == before


def test_park_cap_env_var_sets_the_default(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EPS_FELLOWS_QUEUE_WAIT_SECONDS sets the park cap when the config does not."""
    monkeypatch.setenv("EPS_FELLOWS_QUEUE_WAIT_SECONDS", "42")
    toml = (env / "fellows.toml").read_text().replace("park_cap_seconds = 0.3\n", "")
    (env / "fellows.toml").write_text(toml)
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "42s" in result.stdout


def test_relative_state_dir_is_next_to_the_config_file(env: Path, tmp_path: Path) -> None:
    """A relative state_dir resolves against the config file's directory, not the current one."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "fellows.toml").write_text('state_dir = "state"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = load_config(folder / "fellows.toml")
    assert config.journal_path == folder / "state" / "journal.sqlite3"
    result = run("--config", str(folder / "fellows.toml"), "config", "check")
    assert result.exit_code == 0, result.output
    assert str(folder / "state" / "journal.sqlite3") in result.stdout


def test_a_missing_lane_program_is_a_warning_not_an_error(env: Path) -> None:
    """A lane command not on PATH passes config check (exit 0) with a warning on stderr naming it."""
    (env / "fellows.toml").write_text(_toml(env, gcp="['no-such-gcloud-xyz', 'batch', 'fsm-{dispatch_id}']"))
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "warning: [lanes.gcp] command: 'no-such-gcloud-xyz' is not found on PATH" in result.stderr
    assert "config OK" in result.stdout


def test_a_tiny_poll_is_shown_as_it_is(env: Path) -> None:
    """A sub-second poll is shown with its real value (not rounded up to 1s) and warned about."""
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "every 0.05s" in result.stdout
    assert "poll_interval_seconds=0.05 asks SLURM more than once a second" in result.stderr


def test_a_park_cap_under_two_polls_is_warned_about(env: Path) -> None:
    """A cap shorter than two poll intervals passes config check with a warning naming both values."""
    (env / "fellows.toml").write_text(_toml(env, fellows="park_cap_seconds = 5\npoll_interval_seconds = 10"))
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "warning: [fellows] a park cap of 5 s is under two polls of 10 s" in result.stderr
    (env / "fellows.toml").write_text(_toml(env, fellows="park_cap_seconds = 600\npoll_interval_seconds = 10"))
    assert "park cap" not in run("config", "check").stderr


def test_the_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/fellows.toml is a valid config: config check exits 0 with its gcp lane."""
    monkeypatch.delenv("FELLOWS_FSM_CONFIG", raising=False)
    example = Path(__file__).resolve().parents[3] / "examples" / "fellows.toml"
    result = run("config", "check", "--config", str(example))
    assert result.exit_code == 0, result.output
    assert "gcloud batch jobs submit" in result.stdout


def test_diagram_reference_formats(env: Path, tmp_path: Path) -> None:
    """mermaid and markdown without --dispatch are the reference diagram (its spine; every row with --full) and
    docs page."""
    ladder = FellowsConfig(park_cap_seconds=600).ladder
    assert run("diagram").stdout == spine_mermaid(ladder)
    assert run("diagram", "--full").stdout == mermaid(ladder)
    out = tmp_path / "page.md"
    assert run("diagram", "--format", "markdown", "-o", str(out)).exit_code == 0
    assert out.read_text() == state_diagram_page()


def test_demo_refuses_the_fake(env: Path) -> None:
    """The demo runs on the real SLURM only: with a fake port it exits 5 and says so."""
    result = run("demo")
    assert result.exit_code == 5
    assert "real SLURM only" in one_error_line(result)


def test_config_check_says_how_each_paid_lane_is_paid_for_and_the_budget(tmp_path: Path) -> None:
    """config check prints each paid lane's price and whether it is followed, and the [budget] with what a
    handoff over it does."""
    config = tmp_path / "fellows.toml"
    config.write_text(
        '[lanes.gcp]\ncommand = ["true"]\nstatus = ["true"]\ncancel = ["true"]\nprice_per_gpu_hour = 2.5\n'
        '[budget]\npaid_gpu_hours_per_day = 64\non_budget = "refuse"\n'
    )
    result = run("config", "check", "--config", str(config))
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "paid gcp 2.5 a GPU-hour; followed to its end, cancel deletes it" in text
    assert "budget 64 paid GPU-hours a day; a handoff over it ends it NO_BUDGET (local time)" in text
