"""Renders are a contract: for one fixed job at one fixed time, the exact sbatch (or lane command) of every rung of
every lane of one fixed multi-lane config is a golden file in tests/unit/slurm/golden/, compared byte for byte.

The renders go through the real path: ``SlurmScheduler.submit`` over ``MockRunner`` (slurm/mock.py), which records
each request (argv, environment, stdin), the port built as ``slurm_port`` builds it for the lane; a command lane's
argv from ``CommandLane.command``. ``FELLOWS_GOLDEN_UPDATE=1`` rewrites the files instead of comparing them
(golden/README.md).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

from fellows_fsm.config.file import Config
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.lanes.command.config import LaneConfig
from fellows_fsm.lanes.command.lane import CommandLane, job_values
from fellows_fsm.lanes.slurm.config import FellowsConfig
from fellows_fsm.lanes.slurm.lane import slurm_port
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.transport import LocalTransport, Reply, Request, remote_command

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("FELLOWS_GOLDEN_UPDATE") == "1"
NOW = "2026-12-02 04:00:00"
DISPATCH = "0123abcd"
SPEC = JobSpec(
    name="golden-train",
    script="train.sbatch",
    gpus=8,
    time_limit_seconds=7200,
    extra_args=("--partition=mine", "--export=ALL,RUN=golden"),
    workdir=".",
)
TABLES: dict[str, Any] = {
    "fellows": {"qos": "high-eur", "qos_ladder": ["normal-eur", "low-eur"], "park_cap_seconds": 600.0},
    "lanes": {
        "inst": {
            "kind": "slurm",
            "host": "me@inst-login",
            "remote_workdir": "/scratch/me",
            "partition": "h200",
            "account": "lab-acct",
            "gres": "gpu:h200:{gpus}",
            "qos": "inst-high",
            "qos_ladder": ["inst-low"],
            "park_cap_seconds": 900.0,
        },
        "lrz": {
            "kind": "slurm",
            "slurm_conf": "/etc/slurm-lrz/slurm.conf",
            "gpus_per_node": "a100:{gpus}",
            "qos": "lrz-normal",
            "park_cap_seconds": 1200.0,
        },
        "gcp": {
            "command": [
                "gcloud", "batch", "jobs", "submit", "fsm-{dispatch_id}", "--location=europe-west4",
                "--gpus={gpus}", "--minutes={time_limit_minutes}",
            ],
            "probe": ["gcloud", "batch", "jobs", "describe", "fsm-{dispatch_id}", "--location=europe-west4"],
            "status": ["fsm-batch-status", "fsm-{dispatch_id}", "--location=europe-west4", "--gpus={gpus}"],
            "cancel": ["gcloud", "batch", "jobs", "delete", "fsm-{dispatch_id}", "--location=europe-west4", "--quiet"],
        },
    },
    "router": {"order": ["fellows", "inst", "lrz", "gcp"]},
}  # fmt: skip
FELLOWS_OVER_SSH = {"host": "fellows-login", "remote_workdir": "/home/me/runs"}


def config_of(tables: Mapping[str, Any]) -> Config:
    """The config of these TOML tables."""
    return Config.from_mapping(tables, source="golden.toml")


def _sbatch_replies(request: Request) -> Reply:
    """sbatch's parsable reply to every submit (the render is what is recorded, not the answer)."""
    assert request.argv[0] == "sbatch", request.argv
    return Reply(0, "4242\n", "", 0.001)


def _port(lane: FellowsConfig, state_dir: Path) -> tuple[SlurmScheduler, MockRunner, str]:
    """The lane's port as ``slurm_port`` builds it, over a MockRunner of the same reach; and where it runs."""
    real = slurm_port(lane, state_dir)
    transport = real.runner.transport
    runner = MockRunner(_sbatch_replies, remote=transport.remote)
    port = SlurmScheduler(runner, remote_workdir=real.remote_workdir, options=real.options)
    if isinstance(transport, LocalTransport):
        where = f"here, SLURM_CONF={transport.slurm_conf or 'as in the environment'}"
    else:
        where = transport.where
    return port, runner, where


def _lines(title: str, items: tuple[str, ...] | list[str]) -> list[str]:
    return [f"{title}:", *(f"  {json.dumps(item)}" for item in items)]


def _rung_render(port: SlurmScheduler, runner: MockRunner, rung: Rung, ladder: Ladder) -> list[str]:
    """One rung's submit as it reaches the transport: argv, environment, cwd, remote command line, stdin, notes. Its
    token is the dispatch's on that rung (``Ladder.token_of``: numbered within the rung's own lane)."""
    token = ladder.token_of(DISPATCH, rung.index)
    cap = rung.park_cap_seconds
    with freeze_time(NOW):
        deadline = time.time() + cap
        job = port.submit(SPEC, qos=rung.qos, token=token, deadline=deadline)
    assert job == "4242"
    (request,) = runner.requests[-1:]
    out = [f"## rung {rung.where} ({token}; park cap {cap:g} s, deadline now+{cap:g} s)"]
    out += _lines("argv", request.argv)
    out.append(f"env: {json.dumps(dict(request.env), sort_keys=True)}")
    out.append(f"drop_env_prefixes: {json.dumps(list(request.drop_env_prefixes))}")
    out.append(f"keep_env: {json.dumps(list(request.keep_env))}")
    out.append(f"cwd: {json.dumps(request.cwd)}")
    if runner.mock.remote:
        command = remote_command(request.argv, request.env, request.drop_env_prefixes, request.keep_env)
        out.append(f"remote command line: {command}")
        assert request.stdin is not None
        assert request.stdin == (GOLDEN / SPEC.script).read_bytes(), "the script must be sent unchanged"
        digest = hashlib.sha256(request.stdin).hexdigest()
        out.append(f"stdin: {len(request.stdin)} bytes, {SPEC.script} unchanged (sha256 {digest})")
    else:
        out.append(f"stdin: {json.dumps(request.stdin)}")
    out += _lines("notes", list(port.last_notes))
    return out


def _command_render(settings: LaneConfig) -> list[str]:
    """A command lane's handoff argv, its probe's, status's and cancel's, and the job's values in its environment."""
    lane = CommandLane(settings)
    out = ["## handoff", *_lines("argv", lane.command(DISPATCH, SPEC))]
    for key in ("probe", "status", "cancel"):
        template = getattr(settings, key)
        if template is not None:
            out += _lines(f"{key} argv", lane.render(template, DISPATCH, SPEC))
    values = dict(job_values(DISPATCH, SPEC))
    values["workdir"] = values["workdir"].replace(str(GOLDEN), "<golden>")
    out.append(f"values (FSM_* environment): {json.dumps(values, sort_keys=True)}")
    return out


def renders(config: Config, state_dir: Path) -> dict[str, str]:
    """Every lane's golden text for ``config``: each SLURM lane's rungs (of the one joined ladder), each command
    lane's handoff."""
    ladder = config.ladder_for("prod")
    out: dict[str, str] = {}
    for lane in config.slurm_lanes:
        port, runner, where = _port(lane, state_dir)
        lines = [f"# lane {lane.name}: kind slurm, {where}; job {SPEC.name} at {NOW} UTC, dispatch {DISPATCH}"]
        for rung in ladder.rungs:
            if rung.lane == lane.name:
                lines += ["", *_rung_render(port, runner, rung, ladder)]
        out[lane.name] = "\n".join(lines) + "\n"
    for settings in config.lanes:
        if isinstance(settings, LaneConfig):
            lines = [f"# lane {settings.name}: kind command; job {SPEC.name}, dispatch {DISPATCH}", ""]
            out[settings.name] = "\n".join([*lines, *_command_render(settings)]) + "\n"
    return out


@pytest.fixture
def in_golden(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the golden directory, where the fixed script is (its path in the renders is relative)."""
    monkeypatch.chdir(GOLDEN)
    return GOLDEN


def _golden_renders(tmp_path: Path) -> dict[str, str]:
    """The fixed config's renders, and fellows' over ssh (the same config with [fellows] host) as ``fellows-ssh``."""
    out = renders(config_of(TABLES), tmp_path)
    over_ssh = copy.deepcopy(TABLES)
    over_ssh["fellows"].update(FELLOWS_OVER_SSH)
    out["fellows-ssh"] = renders(config_of(over_ssh), tmp_path)["fellows"]
    return out


@pytest.mark.parametrize("lane", ["fellows", "fellows-ssh", "inst", "lrz", "gcp"])
def test_each_lane_renders_exactly_its_golden_file(lane: str, in_golden: Path, tmp_path: Path) -> None:
    """What reaches sbatch (or the lane's command) on each rung of the lane is its golden file, byte for byte."""
    text = _golden_renders(tmp_path)[lane]
    path = in_golden / f"{lane}.txt"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{path} differs; see golden/README.md to regenerate"


def test_every_lane_has_a_golden_file_and_no_file_is_stale(in_golden: Path, tmp_path: Path) -> None:
    """The golden directory holds one file per rendered lane and no other render."""
    rendered = {f"{lane}.txt" for lane in _golden_renders(tmp_path)}
    assert {p.name for p in in_golden.glob("*.txt")} == rendered


def _changed(change: str) -> dict[str, Any]:
    """The fixed tables with one lane's table changed (or one lane added or removed)."""
    tables = copy.deepcopy(TABLES)
    lanes, order = tables["lanes"], tables["router"]["order"]
    if change == "inst-cluster-keys":
        lanes["inst"].update(partition="a100", account="other-acct", gres="gpu:a100:{gpus}", host="inst2")
    elif change == "lrz-gres":
        del lanes["lrz"]["gpus_per_node"]
        lanes["lrz"].update(gres="gpu:{gpus}", slurm_conf="/etc/slurm-lrz2/slurm.conf", partition="big")
    elif change == "gcp-command":
        lanes["gcp"]["command"] = ["sky", "launch", "fsm-{dispatch_id}", "--gpus=A100:{gpus}"]
    elif change == "fellows-over-ssh":
        tables["fellows"].update(FELLOWS_OVER_SSH, partition="fellows-gpu", gres="gpu:h100:{gpus}")
    elif change == "caps":
        tables["fellows"]["park_cap_seconds"] = 60.0
        lanes["inst"]["park_cap_seconds"] = 30.0
    elif change == "lrz-removed":
        del lanes["lrz"]
        order.remove("lrz")
    elif change == "slurm-lane-added-last":
        lanes["extra"] = {"kind": "slurm", "host": "extra-login", "qos": "extra-q", "partition": "p"}
        order.insert(order.index("gcp"), "extra")
    elif change == "command-lane-added":
        lanes["manual"] = {"command": ["true"], "manual_only": True}
    else:  # pragma: no cover - a typo in a parameter
        raise AssertionError(change)
    return tables


_CHANGED_LANE = {
    "inst-cluster-keys": {"inst"},
    "lrz-gres": {"lrz"},
    "gcp-command": {"gcp"},
    "fellows-over-ssh": {"fellows"},
    "caps": {"fellows", "inst"},
    "lrz-removed": {"lrz"},
    "slurm-lane-added-last": {"extra"},
    "command-lane-added": {"manual"},
}


@pytest.mark.parametrize("change", sorted(_CHANGED_LANE))
def test_changing_one_lane_never_changes_another_lanes_render(change: str, in_golden: Path, tmp_path: Path) -> None:
    """Adding, removing or changing one lane's table leaves every other lane's render byte for byte the same."""
    before = renders(config_of(TABLES), tmp_path)
    after = renders(config_of(_changed(change)), tmp_path)
    others = (set(before) | set(after)) - _CHANGED_LANE[change]
    assert others, "the change must leave some lane alone"
    for lane in sorted(others):
        assert after[lane] == before[lane], f"{change} changed lane {lane}'s render"
    touched = _CHANGED_LANE[change] & set(before) & set(after)
    assert all(after[lane] != before[lane] for lane in touched), "the change must show in its own lane's render"


@pytest.mark.parametrize("change", ["fellows-rung-added", "slurm-lane-added-before-inst"])
def test_a_ladder_change_in_one_lane_never_renumbers_another_lanes_tokens(
    change: str, in_golden: Path, tmp_path: Path
) -> None:
    """A rung added to fellows, or a SLURM lane added before inst, leaves inst's and lrz's renders unchanged."""
    tables = copy.deepcopy(TABLES)
    if change == "fellows-rung-added":
        tables["fellows"]["qos_ladder"].append("spare-eur")
    else:
        tables["lanes"]["first"] = {"kind": "slurm", "host": "first-login", "qos": "first-q"}
        tables["router"]["order"].insert(1, "first")
    before = renders(config_of(TABLES), tmp_path)
    after = renders(config_of(tables), tmp_path)
    assert (after["inst"], after["lrz"]) == (before["inst"], before["lrz"])
