"""Taking a request in: check it against the config, decide how it is journaled, and journal it.

Pure decisions (``admit``) and the one write (``enqueue``, no driver lock needed: the driving router adopts the
row on its next tick), plus the JSON a dispatch carries (its fallback lane, its spec) so any later router finishes
it as it was created.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from fellows_fsm.config.file import Config
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.errors import ConfigError, UsageError
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import LaneSettings
from fellows_fsm.lanes.registry import lane_table, parse_lane
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["INTENTS", "Admission", "admit", "enqueue", "lane_from_json", "lane_json", "spec_of"]

INTENTS = ("prod", "debug")


@attrs.frozen
class Admission:
    """A dispatch as it will be journaled: checked, named, on its ladder, with the settings it carries."""

    spec: JobSpec
    lane: str
    """The ladder lane's name (``fellows``), else the lane it is pinned to."""
    ladder: Ladder | None
    """None for a dispatch pinned to a command lane (it never enters the ladder)."""
    pinned: bool
    settings: dict[str, Any]


def admit(
    config: Config,
    spec: JobSpec,
    *,
    intent: str = "prod",
    pin: str | None = None,
    ladder: Ladder | None = None,
    note: str = "",
) -> Admission:
    """Check a request against ``config`` and decide how it is journaled (no I/O but reading the current
    directory; raises ConfigError, or UsageError when that directory is gone).

    A debug job gets the cluster's debug name prefix; ``ladder`` replaces the intent's (the preflight's kept
    rungs); ``note`` is kept in the settings and written on the first step. A local job with no ``workdir`` gets
    the current directory, so the driver's sbatch runs where the user's own would (a job with no --chdir runs there).
    """
    if intent not in INTENTS:
        raise ConfigError(f"intent={intent!r} is not known; use 'prod' or 'debug'")
    pinned = config.lane_named(pin) if pin is not None else None
    if pin is not None and pinned is None:
        known = ", ".join([config.fellows.name, *(lane.name for lane in config.lanes)])
        raise ConfigError(f"--pin {pin!r} is not a configured lane; known lanes: {known}")
    if pinned is not None and not pinned.walks_ladder:
        return Admission(spec, pinned.name, None, True, _settings(config, pinned.name, note))
    fellows = config.fellows
    if spec.workdir is None and fellows.host is None:
        spec = attrs.evolve(spec, workdir=_current_directory())
    if intent == "debug" and fellows.debug_qos is not None and not spec.name.startswith(fellows.debug_name_prefix):
        spec = attrs.evolve(spec, name=fellows.debug_name_prefix + spec.name)
    fallback = config.following(fellows.name) if pin is None else None
    return Admission(
        spec, fellows.name, ladder or fellows.ladder_for(intent), pin is not None, _settings(config, fallback, note)
    )


def enqueue(
    config: Config,
    journal: Journal,
    spec: JobSpec,
    *,
    intent: str = "prod",
    pin: str | None = None,
    ladder: Ladder | None = None,
    note: str = "",
    at: float | None = None,
) -> str:
    """Journal a dispatch for whichever process drives ``journal`` (no driver lock needed); return its id.

    Nothing is queued here: the driving router adopts the row on its next tick and submits it (a lane-pinned
    dispatch: starts its command). Use it when another process drives the journal.
    """
    admitted = admit(config, spec, intent=intent, pin=pin, ladder=ladder, note=note)
    dispatch_id = uuid.uuid4().hex[:12]
    now = time.time() if at is None else at
    if admitted.ladder is None:
        journal.add_lane_dispatch(
            dispatch_id, admitted.spec, intent=intent, lane=admitted.lane, at=now, settings=admitted.settings
        )
    else:
        journal.add_dispatch(
            dispatch_id,
            admitted.spec,
            admitted.ladder,
            pinned=admitted.pinned,
            intent=intent,
            at=now,
            settings=admitted.settings,
        )
    return dispatch_id


def _current_directory() -> str:
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise UsageError(
            "the current directory no longer exists; cd to the directory the job should run in and submit again"
        ) from None


def _settings(config: Config, lane: str | None, note: str = "") -> dict[str, Any]:
    """What a dispatch carries from its creation on, so any later watch finishes it the same way."""
    lane_config = config.lane(lane) if lane is not None else None
    settings: dict[str, Any] = {
        "fallback": None if lane_config is None else lane_json(lane_config),
        "controller_deadline": config.router.controller_deadline,
        "in_place": config.router.change_rung == "in-place",
        "park_early": config.fellows.park_early,
        "park_early_last_rung": config.fellows.park_early_last_rung,
        "config": config.source,
    }
    if note:
        settings["note"] = note
    return settings


def lane_json(lane: LaneSettings) -> dict[str, Any]:
    """A lane's config as the journal keeps it with each dispatch (its table, with its kind)."""
    return {"name": lane.name, **lane_table(lane)}


def lane_from_json(data: Mapping[str, Any]) -> LaneSettings:
    """A lane journaled by ``lane_json`` (one journaled before kinds has none: a command lane)."""
    return parse_lane(str(data["name"]), {key: value for key, value in data.items() if key != "name"})


def spec_of(row: DispatchRow) -> JobSpec:
    values = dict(row.spec)
    values["extra_args"] = tuple(values.get("extra_args", ()))
    return JobSpec(**values)
