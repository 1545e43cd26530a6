"""The inbox: every message a command leaves for the journal's driver, and the driver's answer, written and read
here and nowhere else.

- a dispatch: ``admit`` decides its row (pure), ``enqueue`` journals it (no driver lock needed), and the driver
  reads the rows after the last it saw (``enqueued``, on every tick) and adopts them;
- a cancel: ``request_cancel`` journals ``cancel:<id>`` and waits; the driver's tick answers each request
  (``answer_cancels``: ``cancelled:<id>``, the jobs it scancelled or the error);
- the driver's config: ``remember_config`` journals what a driver started later drives with (``driver-config``),
  ``journaled_config`` reads it back, ``check_cluster`` refuses a config that reaches another cluster.

Plus the JSON a dispatch carries (its fallback lane, its spec), so any later driver finishes it as it was created.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config, config_mapping
from fellows_fsm.config.notify import EVENTS, check_secrets
from fellows_fsm.config.route import Route
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.budget import remember_budget
from fellows_fsm.driver.environment import offered_env
from fellows_fsm.driver.wake import wake
from fellows_fsm.errors import (
    ConfigError,
    FellowsError,
    JournalBusy,
    JournalError,
    LaneError,
    SchedulerError,
    SchedulerUnreachable,
    SshLoginRefused,
    UsageError,
)
from fellows_fsm.journal.queries import refuse_handed_off
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.scripts import drop_script, keep_script
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import LaneSettings
from fellows_fsm.lanes.registry import lane_table, parse_lane
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.logs import output_settings

__all__ = [
    "CANCEL_ANSWER",
    "CANCEL_REQUEST",
    "DRIVER_CONFIG",
    "Admission",
    "ScancelLater",
    "admit",
    "answer_cancels",
    "answered_error",
    "cancels_waiting",
    "check_cluster",
    "config_remembered",
    "driver_budget",
    "enqueue",
    "enqueued",
    "has_work",
    "journaled_config",
    "lane_from_json",
    "lane_json",
    "notify_work",
    "offer_env",
    "reaches",
    "remember_config",
    "request_cancel",
    "scancel_waits",
]

CANCEL_REQUEST = "cancel:"
"""The meta key prefix of a cancel a command asks of the driver (the driver does every port call)."""
CANCEL_ANSWER = "cancelled:"
"""The meta key prefix of the driver's answer to a cancel request."""
DRIVER_CONFIG = "driver-config"
"""The journal's meta key for what the background driver drives with: the config and the SLURM environment."""
PASSED_ENV = ("SLURM_CONF", "PATH")
"""The environment a driver needs to reach the cluster as the submitter did, journaled with its config."""


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


def admit(config: Config, spec: JobSpec, route: Route, *, ladder: Ladder | None = None, note: str = "") -> Admission:
    """Decide how a request going where ``route`` says (``Config.route``) is journaled (no I/O but reading the
    current directory; raises UsageError when that directory is gone).

    A debug job gets the cluster's debug name prefix; ``ladder`` replaces the route's (the preflight's kept rungs);
    ``note`` is kept in the settings and written on the first step. A local job with no ``workdir`` gets the current
    directory, so the driver's sbatch runs where the user's own would (a job with no --chdir runs there).
    """
    check_secrets(config.notify)  # a sink's secret_env unset here: refused, nothing queued
    if route.ladder is None:
        return Admission(spec, route.lane, None, True, _settings(config, route.lane, note))
    fellows = config.fellows
    if spec.workdir is None and fellows.host is None:
        spec = attrs.evolve(spec, workdir=_current_directory())
    if (
        route.intent == "debug"
        and fellows.debug_qos is not None
        and not spec.name.startswith(fellows.debug_name_prefix)
    ):
        spec = attrs.evolve(spec, name=fellows.debug_name_prefix + spec.name)
    ladder = route.ladder if ladder is None else ladder
    return Admission(spec, route.lane, ladder, route.pinned, _settings(config, route.fallback, note))


def enqueue(
    config: Config,
    journal: Journal,
    spec: JobSpec,
    route: Route | None = None,
    *,
    ladder: Ladder | None = None,
    note: str = "",
    at: float | None = None,
    dispatch_id: str | None = None,
) -> str:
    """Journal a dispatch for whichever process drives ``journal`` (no driver lock needed); return its id (a new
    one unless ``dispatch_id`` is given).

    Nothing is queued here: the driving router adopts the row (``enqueued``) and submits it (a lane-pinned
    dispatch: starts its command). Every dispatch is born this way.
    """
    route = config.route() if route is None else route
    admitted = admit(config, spec, route, ladder=ladder, note=note)
    dispatch_id = dispatch_id or new_id()
    now = time.time() if at is None else at
    # The script as it is now, kept before the row that uses it: every rung (and a paid lane) reads this copy.
    kept = keep_script(journal.path.parent, dispatch_id, admitted.spec)
    settings = admitted.settings
    if admitted.ladder is not None and kept.kept_script is not None:  # where its output goes, for `logs`
        settings = {**settings, "output": output_settings(Path(kept.kept_script))}
    try:
        if admitted.ladder is None:
            journal.add_lane_dispatch(
                dispatch_id, kept, intent=route.intent, lane=admitted.lane, at=now, settings=settings
            )
        else:
            journal.add_dispatch(
                dispatch_id,
                kept,
                admitted.ladder,
                pinned=admitted.pinned,
                intent=route.intent,
                at=now,
                settings=settings,
            )
    except BaseException:
        if journal.dispatch(dispatch_id) is None:
            drop_script(journal.path.parent, dispatch_id)  # no row uses it
        raise
    path = journal.path

    def woken() -> None:
        wake(path)

    journal.after_commit(woken)  # once committed, the driver submits it at once, not at its next poll (driver/wake.py)
    return dispatch_id


def enqueue_many(
    config: Config,
    journal: Journal,
    requests: Sequence[tuple[JobSpec, Ladder | None, str]],
    route: Route,
    *,
    at: float,
) -> list[str]:
    """Journal one dispatch per ``(spec, ladder, note)`` in ONE transaction (all or none) and wake the driver once;
    return their ids in order."""
    ids = [new_id() for _ in requests]
    try:
        with journal.batch():
            for dispatch_id, (spec, ladder, note) in zip(ids, requests, strict=True):
                enqueue(
                    config,
                    journal,
                    spec,
                    route,
                    ladder=ladder,
                    note=note,
                    at=at,
                    dispatch_id=dispatch_id,
                )
    except BaseException:
        for dispatch_id in ids:
            if journal.dispatch(dispatch_id) is None:
                drop_script(journal.path.parent, dispatch_id)  # none of the batch was kept
        raise
    return ids


def new_id() -> str:
    """A new dispatch id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def enqueued(journal: Journal, *, after: int, known: Container[str] = ()) -> tuple[int, list[DispatchRow]]:
    """The driver's side of ``enqueue``: the live dispatches journaled after row ``after`` (by any process) that
    are not ``known``, and the journal's last row id (reads only the new rows)."""
    return journal.live_after(after, known=known)


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


# ----------------------------------------------------------------------------------------------- a cancel
def request_cancel(
    journal: Journal,
    row: DispatchRow,
    *,
    at: float,
    step: float,
    wait: float,
    ensure_driver: Callable[[], object],
    sleep: Callable[[float], None],
) -> list[str]:
    """Journal a cancel of ``row`` for the journal's driver and return the ids of the jobs it scancelled.

    ``ensure_driver`` is called before each look (a driver that stopped is started again); the answer is looked
    for every ``step`` seconds, up to ``wait`` seconds, then JournalBusy names the driver (the request stays
    journaled for its next tick). A dispatch handed to a command lane is refused first (FellowsError), as is an
    answer that carries an error.
    """
    refuse_handed_off(journal, row, handing=True)  # a handoff to a followed lane is the driver's to tell
    journal.drop_meta(CANCEL_ANSWER + row.id)
    journal.put_meta(CANCEL_REQUEST + row.id, {"at": at})
    wake(journal.path)
    for attempt in itertools.count():  # counted, not timed: a frozen test clock must not make it wait forever
        ensure_driver()
        answer = journal.get_meta(CANCEL_ANSWER + row.id)
        if answer is not None:
            journal.drop_meta(CANCEL_ANSWER + row.id)
            if "error" in answer:
                raise answered_error(answer)
            return [str(j) for j in answer["jobs"]]
        if attempt * step >= wait:
            owner = journal.owner()
            holder = owner.describe() if owner is not None else "an unknown process"
            raise JournalBusy(
                holder,
                f"journal {journal.path} is driven by another router ({holder}), which did not answer the "
                f"cancel of dispatch {row.id} within {wait:g} s; the request stays journaled and the journal's "
                "driver does it at its next tick",
            )
        sleep(step)
    raise AssertionError("unreachable")  # pragma: no cover - the loop above returns or raises


_ANSWERED: dict[int, type[FellowsError]] = {
    kind.exit_code: kind
    for kind in (UsageError, ConfigError, SchedulerError, SchedulerUnreachable, JournalError, LaneError)
}
"""The error class an answer's exit code is raised as (the most general one of that code)."""
_ANSWERED[SshLoginRefused.exit_code] = SchedulerUnreachable  # (its own class needs the host, which is not journaled)


def answered_error(answer: Mapping[str, Any]) -> FellowsError:
    """The error a driver answered a request with, raised in the asking process with the driver's line and exit
    code (``exit_code``: e.g. 6, SLURM unreachable; an answer journaled without one is exit 1)."""
    code = int(answer.get("exit_code", FellowsError.exit_code))
    error = _ANSWERED.get(code, FellowsError)(str(answer["error"]))
    error.exit_code = code  # a code of a narrower class (9: ssh cannot log in) is kept as it was
    return error


class CancelLater(Exception):
    """The dispatch's handoff to a followed lane is under way: its cancel is answered once the lane has the job
    (then it is deleted)."""


class ScancelLater(Exception):
    """The dispatch is withdrawn (journaled: never submitted again), but its jobs ``job_ids`` cannot be scancelled
    from this driver now (``why``: a SLURM command it cannot run); the request stays for the next ticks."""

    def __init__(self, job_ids: Sequence[str], why: str) -> None:
        super().__init__(why)
        self.job_ids = list(job_ids)
        self.why = why


def answer_cancels(journal: Journal, withdraw: Callable[[str], list[str]]) -> list[str]:
    """The driver's side of ``request_cancel``: ``withdraw`` each requested dispatch, journal the answer (the job
    ids, or the error) for the asking process, drop the request; return the ids withdrawn. A withdrawal whose
    scancel must wait (ScancelLater) is answered at once with ``later`` (why) and its request kept, marked, until a
    tick scancels its jobs (then it is dropped, answered already)."""
    done = []
    for dispatch_id, request in journal.meta_with_prefix(CANCEL_REQUEST).items():
        answer: dict[str, Any]
        told = isinstance(request, dict) and "later" in request
        try:
            answer = {"jobs": withdraw(dispatch_id)}
            done.append(dispatch_id)
        except CancelLater:
            continue  # its paid job is being made: the request waits for the tick that follows it
        except ScancelLater as later:
            if not told:
                journal.put_meta(CANCEL_REQUEST + dispatch_id, {**request, "later": later.why})
                journal.put_meta(CANCEL_ANSWER + dispatch_id, {"jobs": later.job_ids, "later": later.why})
            continue
        except FellowsError as exc:
            if told:
                continue  # withdrawn already, its asker answered: its scancel is tried again next tick
            answer = {"error": str(exc), "exit_code": exc.exit_code}
        if not told:
            journal.put_meta(CANCEL_ANSWER + dispatch_id, answer)
        journal.drop_meta(CANCEL_REQUEST + dispatch_id)
    return done


def scancel_waits(journal: Journal, dispatch_id: str) -> str | None:
    """Why a withdrawn dispatch's jobs wait for their scancel (its cancel request kept: ``ScancelLater``), or None."""
    request = journal.get_meta(CANCEL_REQUEST + dispatch_id)
    return str(request["later"]) if isinstance(request, dict) and "later" in request else None


def cancels_waiting(journal: Journal) -> bool:
    """Is a cancel request waiting for the driver?"""
    return bool(journal.meta_with_prefix(CANCEL_REQUEST))


def has_work(journal: Journal) -> bool:
    """Is there anything for a driver to do: a live dispatch, a request (a cancel) waiting, or a paid job whose
    delete its lane has not taken yet?"""
    if journal.dispatches(live_only=True) or cancels_waiting(journal):
        return True
    return bool(journal.paid_runs(status=[PaidStatus.CANCELLING]))


def notify_work(journal: Journal) -> bool:
    """Is an event still to be sent to a sink of the driver's config? A command starts a driver for it (a driver
    killed before it sent an event sends it after the restart), and the driver stays until it is sent or given up."""
    saved = journal.get_meta(DRIVER_CONFIG)
    sinks = saved["config"].get("notify", {}) if isinstance(saved, dict) and "config" in saved else {}
    with contextlib.suppress(FellowsError, sqlite3.Error):  # (a journal of an older schema: no outbox yet)
        for name, table in sinks.items() if isinstance(sinks, dict) else ():
            if isinstance(table, dict) and journal.unsent(name, table.get("events", EVENTS), limit=1):
                return True
    return False


# ----------------------------------------------------------------------------------------------- the driver's config
def remember_config(config: Config, journal: Journal) -> str | None:
    """Journal what a driver started later needs (the config, SLURM_CONF and PATH), so it needs neither a config
    file, nor a current directory, nor the environment of whoever starts it. The latest submit's wins, but only on
    the cluster the journal's live dispatches are driven on (``check_cluster``). Its [budget] is the one every
    driver of the journal applies from its next tick, if it may change it (driver/budget.py: ``remember_budget``);
    returns what to say of the [budget] (its change, or why it was not applied), or None."""
    check_cluster(config, journal)
    applied = driver_budget(journal) or config.budget  # (no driver config yet: a driver would start with this one)
    saved = journal.get_meta(DRIVER_CONFIG)
    env = offered_env(_slurm_lanes(config), saved.get("env") if saved else None, os.environ, PASSED_ENV)
    journal.put_meta(DRIVER_CONFIG, {"config": config_mapping(config), "source": config.source, "env": env})
    journal.mark_sinks([sink.name for sink in config.notify.sinks])  # a new sink is told what happens from now on
    return remember_budget(config, journal, at=time.time(), applied=applied)  # applied from the driver's next tick


def offer_env(config: Config, journal: Journal) -> None:
    """Offer this command's SLURM environment to the journal's driver (a cancel: it needs the cluster too): taken
    only where it finds SLURM's commands and the journaled one does not (driver/environment.py)."""
    saved = journal.get_meta(DRIVER_CONFIG)
    if saved is None or not isinstance(saved.get("env"), dict):
        return
    env = offered_env(_slurm_lanes(config), saved["env"], os.environ, PASSED_ENV)
    if env != saved["env"]:
        journal.put_meta(DRIVER_CONFIG, {**saved, "env": env})


def _slurm_lanes(config: Config) -> tuple[SlurmSettings, ...]:
    return (config.fellows, *config.other_slurm_lanes)


def driver_budget(journal: Journal) -> BudgetConfig | None:
    """The [budget] of the driver config journaled (what a driver applies while no [budget] is), or None."""
    saved = journal.get_meta(DRIVER_CONFIG)
    try:
        return BudgetConfig.from_table(saved["config"].get("budget", {})) if saved is not None else None
    except (ConfigError, AttributeError, KeyError, TypeError):
        return None  # a driver config of another version: no limit known


def config_remembered(journal: Journal) -> bool:
    """Has a submit journaled the config a driver drives with (``remember_config``)?"""
    return journal.get_meta(DRIVER_CONFIG) is not None


def journaled_config(path: Path) -> Config:
    """The config a background driver of the journal at ``path`` drives with (and its SLURM environment, set in
    this process's own); ConfigError if no submit journaled one."""
    with contextlib.closing(Journal(path, readonly=True)) as journal:
        saved = journal.get_meta(DRIVER_CONFIG)
    if saved is None:
        raise ConfigError(f"journal {path} carries no driver config; run a `fellows-fsm submit` first")
    os.environ.update({str(k): str(v) for k, v in saved.get("env", {}).items()})
    mapping = dict(saved["config"])
    mapping["state_dir"] = str(path.parent)
    return Config.from_mapping(mapping, source=str(saved.get("source", "journal")))


def reaches(config: Config, env: Mapping[str, str]) -> str:
    """The cluster a config reaches (with SLURM_CONF from ``env`` when local), in words: a journal's dispatches are
    driven on one of these at a time."""
    f = config.fellows
    if f.host is not None:
        options = f" (ssh {' '.join(f.ssh_options)})" if f.ssh_options else ""
        return f"{f.host} over ssh{options}, remote_workdir {f.remote_workdir or 'the login directory'}"
    conf = env.get("SLURM_CONF")
    return f"the local SLURM (SLURM_CONF={conf})" if conf else "the local SLURM (SLURM_CONF unset)"


def check_cluster(config: Config, journal: Journal) -> None:
    """Refuse (ConfigError) a config that reaches another cluster, transport or remote workdir than the one the
    journal's live dispatches were submitted with: each would be driven with whichever config drove last. One
    driver, one port, one squeue a tick; job ids are per cluster."""
    saved = journal.get_meta(DRIVER_CONFIG)
    if saved is None or not has_work(journal):
        return
    mapping = dict(saved["config"])
    mapping["state_dir"] = str(journal.path.parent)
    theirs = reaches(Config.from_mapping(mapping, source="journal"), saved.get("env", {}))
    ours = reaches(config, os.environ)
    if theirs != ours:
        raise ConfigError(
            f"state_dir {journal.path.parent} drives live dispatches on {theirs} (config {saved.get('source')}), "
            f"and config {config.source} reaches {ours}; give this config a state_dir of its own, or use that one"
        )
