"""The lane registry: a table's ``kind`` picks the module that parses it and builds its lane; no kind is the
command kind; an unknown kind is one line, nothing queued; a new kind is one module and one registry line."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import ConfigError, FakeScheduler, JobSpec
from fellows_fsm.config.file import Config, config_mapping
from fellows_fsm.driver.inbox import lane_from_json, lane_json
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes import registry
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.command.lane import CommandLane
from fellows_fsm.lanes.handoff import CompletedHandoff, Handoff, HandoffFiles, HandoffResult, Started
from fellows_fsm.scheduler.port import Scheduler
from tests.unit.cli_helpers import SchedulingFake, refused, run

GCP = {"command": ["gcloud", "batch", "jobs", "submit", "fsm-{dispatch_id}"]}


def _config(lanes: Mapping[str, Any], **top: Any) -> Config:
    """A config of the given ``[lanes.<name>]`` tables (and top-level tables)."""
    return Config.from_mapping({"lanes": dict(lanes), **top}, source="test.toml")


def test_a_lane_table_without_kind_is_a_command_lane() -> None:
    """A ``[lanes.gcp]`` table written before kinds (no ``kind``) loads as the command lane it always was, the same
    as one that says ``kind = "command"``."""
    old = _config({"gcp": GCP})
    explicit = _config({"gcp": {"kind": "command", **GCP}})
    assert old.lanes == explicit.lanes == (CommandSettings(name="gcp", command=tuple(GCP["command"])),)
    assert old.lane("gcp").kind == "command"
    assert not old.lane("gcp").walks_ladder


@pytest.mark.parametrize("kind", ["k8s", "", 7], ids=["unknown word", "empty", "not a string"])
def test_an_unknown_kind_is_one_line_naming_the_lane_and_the_key(kind: object) -> None:
    """``kind`` naming no registered kind is a ConfigError (exit 3) of one line naming the file, the lane, the key
    and the value, and saying which kinds exist."""
    with pytest.raises(ConfigError) as caught:
        _config({"gcp": {"kind": kind, **GCP}})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("test.toml: [lanes.gcp] kind=")
    assert repr(kind) in message
    assert "command" in message
    assert caught.value.exit_code == ConfigError.exit_code == 3


def test_a_slurm_lane_with_no_way_to_reach_it_is_one_line() -> None:
    """``[lanes.other] kind = "slurm"`` with neither host nor slurm_conf is refused in one line naming the lane and
    both keys (the fellows cluster is the environment's; another needs its own way in)."""
    with pytest.raises(ConfigError, match=r"^test\.toml: \[lanes\.other\]: no way to reach .*host.*slurm_conf") as c:
        _config({"other": {"kind": "slurm", "qos": "inst-high"}})
    assert "\n" not in str(c.value)


def test_submit_with_an_unknown_lane_kind_queues_nothing(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """``submit`` under a config with an unknown lane kind exits 3 with one line naming the lane and ``kind``, and
    nothing reaches the cluster or the journal."""
    config = env / "fellows.toml"
    config.write_text(config.read_text(encoding="utf-8") + '\n[lanes.paid]\nkind = "k8s"\n', encoding="utf-8")
    result = run("submit", "--detach", str(script))
    refused(result, 3, "[lanes.paid]", "kind='k8s'")
    assert scheduling_fake.calls["submit"] == 0
    assert not (env / "state" / "journal.sqlite3").exists()


def test_a_lane_journaled_before_kinds_reads_back_as_a_command_lane() -> None:
    """A dispatch's fallback lane as journals before kinds kept it (no ``kind`` key) reads back as that command
    lane, and a lane journaled now reads back equal to its config."""
    lane = CommandSettings(name="gcp", command=("gcloud", "{dispatch_id}"), probe=("true",), timeout_seconds=30.0)
    old = {"name": "gcp", "command": ["gcloud", "{dispatch_id}"], "probe": ["true"], "manual_only": False,
           "timeout_seconds": 30.0}  # fmt: skip
    assert lane_from_json(old) == lane
    assert lane_from_json(lane_json(lane)) == lane
    assert lane_json(lane)["kind"] == "command"


def test_the_journaled_driver_config_keeps_each_lane_kind() -> None:
    """The config a background driver is started with (``config_mapping``) loads back to the same lanes."""
    config = _config({"gcp": GCP, "runpod": {"command": ["runpod", "{gpus}"], "manual_only": True}})
    assert config_mapping(config)["lanes"]["gcp"]["kind"] == "command"
    assert Config.from_mapping(config_mapping(config)).lanes == config.lanes


# --------------------------------------------------------------------------- a throw-away kind, in this test only
@attrs.frozen(kw_only=True)
class BellSettings:
    """A lane that hands a job over by ringing a bell (a word in a list): nothing runs, nothing is forked."""

    kind: ClassVar[str] = "bell"
    walks_ladder: ClassVar[bool] = False

    name: str
    word: str
    manual_only: bool = False


@attrs.define
class BellLane:
    """The bell lane: every handoff rings at once and succeeds."""

    settings: BellSettings
    rung: list[str] = attrs.field(factory=list)
    """The dispatch ids handed over, in order."""

    kind: ClassVar[str] = "bell"
    walks_ladder: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """The lane's name."""
        return self.settings.name

    @property
    def manual_only(self) -> bool:
        """Whether it runs only when pinned."""
        return self.settings.manual_only

    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """What the handoff is: the bell's word and the dispatch."""
        return (self.settings.word, dispatch_id)

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """True once it rang for this dispatch."""
        return dispatch_id in self.rung

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> Handoff:
        """Ring for the dispatch and succeed."""
        self.rung.append(dispatch_id)
        return CompletedHandoff(HandoffResult(self.command(dispatch_id, spec), 0, "", ""))

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> Handoff | None:
        """A ring is never lost."""
        return CompletedHandoff(HandoffResult(was.command, 0, "", "")) if dispatch_id in self.rung else None


BELLS: list[BellLane] = []
"""Every bell lane the kind built (the test looks at what they rang)."""


class BellKind:
    """The bell kind as the registry knows it: ``[lanes.<name>] kind = "bell"`` with a ``word``."""

    name = "bell"

    def parse(self, name: str, table: Mapping[str, Any]) -> BellSettings:
        """The table: ``word`` (required), ``manual_only``."""
        if not isinstance(table.get("word"), str):
            raise ConfigError(f"[lanes.{name}] word={table.get('word')!r} must be a word")
        return BellSettings(name=name, **dict(table))

    def table(self, settings: BellSettings) -> dict[str, Any]:
        """The table back."""
        return {"word": settings.word, "manual_only": settings.manual_only}

    def build(self, settings: BellSettings, *, state_dir: Path) -> BellLane:
        """A bell lane (remembered, for the test to look at)."""
        BELLS.append(BellLane(settings))
        return BELLS[-1]


@pytest.fixture
def bell(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The bell kind in the registry, for this test only: one registry line."""
    monkeypatch.setitem(registry.KINDS, "bell", BellKind())
    BELLS.clear()
    yield
    BELLS.clear()


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    """Frozen time for the router's clock."""
    with freeze_time("2026-11-30 12:00:00") as f:
        yield f


BELL_TOML = """
[fellows]
park_cap_seconds = 60
[lanes.paid]
kind = "bell"
word = "ding"
[lanes.gcp]
command = ["gcloud", "batch", "jobs", "submit", "fsm-{dispatch_id}"]
[router]
order = ["fellows", "paid"]
"""


@pytest.mark.usefixtures("bell")
def test_a_new_kind_is_one_module_and_one_registry_line(tmp_path: Path, frozen: FrozenDateTimeFactory) -> None:
    """A kind added to the registry alone loads from its own table, beside a command lane, and a dispatch that
    parks out of every rung is handed to it exactly once by the unchanged router."""
    data = tomllib.loads(BELL_TOML)
    config = Config.from_mapping({**data, "state_dir": str(tmp_path)}, source="bell.toml")
    assert config.lane("paid") == BellSettings(name="paid", word="ding")
    assert isinstance(config.lane("gcp"), CommandSettings)
    assert Config.from_mapping(config_mapping(config)).lanes == config.lanes
    lanes = registry.build_lanes(config, scheduler=FakeScheduler())
    assert isinstance(lanes.handoff["paid"], BellLane)
    assert isinstance(lanes.handoff["gcp"], CommandLane)

    fake: Scheduler = FakeScheduler(total_gpus=0)  # no rung can start it: the walk ends on the paid lane
    journal = Journal(config.journal_path)
    try:
        router = Router(config, fake, journal).start()
        handle = router.dispatch(JobSpec(name="train", script="train.sbatch", gpus=8))
        for _ in range(20):
            frozen.tick(60.0)
            router.poll()
            if not router.busy:
                break
        final = router.handle(handle.dispatch_id)
        assert (final.state, final.final) == ("HANDED_OFF", True)
        handed = [lane for lane in BELLS if lane.rung]
        assert [lane.rung for lane in handed] == [[handle.dispatch_id]]
        record = journal.handoff(handle.dispatch_id)
        assert record is not None
        assert (record.lane, tuple(record.argv)) == ("paid", ("ding", handle.dispatch_id))
    finally:
        journal.close()


@pytest.mark.usefixtures("bell")
def test_a_new_kind_parses_its_own_table() -> None:
    """A bad value in a new kind's table is refused by that kind, in one line naming the lane and the key."""
    with pytest.raises(ConfigError, match=r"^test\.toml: \[lanes\.paid\] word=None must be a word$"):
        _config({"paid": {"kind": "bell"}})
