"""Check a dispatch against what the cluster grants before its first sbatch: refuse it, or say which rungs it skips.

The judgement (``preflight``) is pure; the grants it judges come through a small cache file beside the journal
(``GrantsCache``), so a burst of submits costs one sacctmgr round per few minutes. ``check_request`` is the
whole check of one request as ``Fellows.check`` makes it (intent, grants read through the cache, judgement) and
its answer a ``Check``. Nothing here submits, changes accounting or writes the journal.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from fellows_fsm.clock import Clock
from fellows_fsm.config.file import Config
from fellows_fsm.config.route import Route
from fellows_fsm.core.budget import never_paid
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.driver.ledger import check_ledger
from fellows_fsm.errors import (
    ConfigError,
    FellowsError,
    LaneError,
    NoBudget,
    SchedulerError,
    SshLoginRefused,
    SubmitRejected,
)
from fellows_fsm.lanes.base import LadderLane
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.scheduler.script import check_spec
from fellows_fsm.slurm.accounting import Association, Grants, LadderCheck, QosInfo, check_ladder, check_lane

__all__ = [
    "GRANTS_TTL_SECONDS",
    "Check",
    "GrantsCache",
    "Preflight",
    "check_request",
    "grants_from_json",
    "grants_to_json",
    "preflight",
]

log = logging.getLogger(__name__)

GRANTS_TTL_SECONDS = 300.0
"""How long read grants are trusted: a burst of submits makes at most one sacctmgr round per this long."""


@attrs.frozen
class Preflight:
    """What the check decided for one dispatch: the rungs it walks, and what to tell the user."""

    ladder: Ladder
    """The rungs the job can start on, first to last (never-fitting rungs left out)."""
    note: str = ""
    """Why rungs were skipped; journaled on the dispatch's first step, before anything is queued."""
    warnings: tuple[str, ...] = ()


def preflight(ladder: Ladder, check: LadderCheck, *, pinned: bool, next_lane: str | None) -> Preflight:
    """Judge the rungs of ``ladder`` as ``check`` found them (``check_ladder``: the job against one cluster's grants).

    Raises SubmitRejected (exit 5) when no rung can ever start the job, or a pinned dispatch's rung cannot.
    """
    if not check.rungs or (pinned and check.skipped and check.skipped[0].rung.index == 0):
        why = "; ".join(s.why.removeprefix("skipping ") for s in check.skipped)
        if pinned:
            raise SubmitRejected(
                f"--pin fellows keeps the job on {ladder.first.qos}, which can never start it ({why}); "
                "change --gpus/--time, or drop --pin to walk the ladder"
            )
        instead = f"; to run it on {next_lane}, submit it with --pin {next_lane}" if next_lane else ""
        raise SubmitRejected(
            f"no rung of the ladder {list(ladder.qos_names)!r} can ever start this job ({why}); nothing was "
            f"queued and nothing handed to a paid lane: change --gpus/--time{instead}"
        )
    note = "; ".join(s.why for s in check.skipped)
    return Preflight(check.ladder, note, check.warnings)


# --------------------------------------------------------------------------- the check of a request
@attrs.frozen
class Check:
    """What the check before the first sbatch decided for one request (``Fellows.check``)."""

    ladder: Ladder | None = None
    """The rungs the job can start on, first to last (never-fitting ones left out); None when not checked."""
    note: str = ""
    """Why rungs were skipped; journaled on the dispatch's first step."""
    notes: tuple[str, ...] = ()
    """One line per skipped rung and per remark of the check, for the user."""
    warnings: tuple[str, ...] = ()
    """Why the request goes ahead other than asked: unchecked (grants unreadable), or a debug intent without
    ``debug_qos``."""
    refused: FellowsError | None = None
    """Why the cluster can never take the request (``submit`` raises it): a QoS it does not have or grant
    (ConfigError), or a job no rung can start (SubmitRejected). None when the request may go ahead."""


def check_request(
    config: Config,
    route: Route,
    spec: JobSpec,
    *,
    lane: LadderLane,
    clock: Clock,
    read: Callable[[], Grants] | None,
    others: Sequence[tuple[LadderLane, Callable[[], Grants] | None]] = (),
    given: Check | bool = True,
) -> Check:
    """Check a request going where ``route`` says (``Config.route``), before anything is journaled or queued: the
    job itself as the command line checks it (``check_spec``: UsageError, exit 2, whatever ``given`` says), then,
    unless ``given`` is a Check already made (used as it is) or False (no check), against what each cluster grants
    (``read()`` for the fellows ``lane``, each of ``others``' for the next SLURM lanes of the order; cached beside
    the journal) and what the ``[budget]`` can never pay for.

    A QoS of the config that its cluster does not have or grant, or a lane's partition or account that its
    cluster does not have (ConfigError, exit 3), or a job no rung of any cluster can ever start (SubmitRejected,
    exit 5), is returned as ``refused`` (with the warnings), for ``submit`` to raise; grants that cannot be read are
    a warning (that cluster's rungs go ahead unchecked), except a login ssh refuses (SshLoginRefused is raised).
    With no ``read`` (a port with nothing to read them from) or a handoff lane pinned, no grants are checked. The
    lane the dispatch may be handed to that cannot be reached from here (a gcp-batch lane with no Google
    credentials) is ``refused`` first (CredentialsMissing, exit 11: nothing is queued). A job the budget can never
    pay for is refused (NoBudget, exit 12) or noted (``_never_paid_words``). With a ``[ledger]`` and a limited
    [budget], a ledger that refuses this tool (``LedgerRefused``, exit 3) is refused; one that does not answer is a
    warning (the paid handoff waits for it).
    """
    check_spec(spec)
    if isinstance(given, Check):
        return given
    if not given:
        return Check()
    warnings = _intent_warnings(config, route)
    missing = _missing_credentials(config, route.paid)
    if missing is not None:
        return Check(warnings=tuple(warnings), refused=missing)
    if config.ledger is not None and route.paid is not None and config.budget.limited:
        try:  # the shared ledger: a wrong password, database or schema is refused before anything is queued
            warnings.extend(filter(None, [check_ledger(config.ledger)]))
        except ConfigError as exc:
            return Check(warnings=tuple(warnings), refused=exc)
    lanes = [(each, r) for each, r in [(lane, read), *others] if each.name in route.walk]
    parts = _parts(config, route, clock, lanes, warnings)
    if isinstance(parts, Check):
        return parts  # refused: a lane's partition or account its cluster does not have
    try:  # each cluster's rungs against its grants (none where they could not be read)
        found = [None if p.grants is None else check_ladder(p.ladder, p.grants, spec, where=p.where) for p in parts]
    except ConfigError as exc:
        return Check(warnings=tuple(warnings), refused=exc)
    checked = _judged(config, route, parts, found, warnings)
    paid = route.paid  # pinned to a free lane, or no lane to hand it to: never handed off, never paid
    why = None if paid is None else never_paid(config.budget, spec, config.lane(paid).price_per_gpu_hour)
    refusal, note = _never_paid_words(config, route, why)
    if checked.refused is None and refusal is not None:
        return attrs.evolve(checked, refused=NoBudget(refusal))
    if checked.refused is None and note is not None:
        return attrs.evolve(checked, notes=(*checked.notes, note))
    return checked


def _intent_warnings(config: Config, route: Route) -> list[str]:
    fellows = config.fellows
    if route.intent == "debug" and fellows.debug_qos is None:
        return [
            "--intent debug, but [fellows] debug_qos is not set: this dispatch walks the production ladder and "
            f"its name gets no {fellows.debug_name_prefix!r} prefix; set debug_qos (e.g. 'dev-eur') to start "
            "debug jobs there"
        ]
    return []


@attrs.frozen
class _Part:
    """One SLURM lane's part of the route: its rungs and what its cluster grants (None: not read)."""

    lane: LadderLane
    ladder: Ladder
    grants: Grants | None
    where: str
    """The lane's table, as a refusal names it."""


def _parts(
    config: Config,
    route: Route,
    clock: Clock,
    lanes: Sequence[tuple[LadderLane, Callable[[], Grants] | None]],
    warnings: list[str],
) -> list[_Part] | Check:
    """Each lane of the route with its rungs and its cluster's grants (read through the cache), its partition and
    account checked; a refused Check when one of those is not the cluster's. None: a handoff lane pinned."""
    if route.ladder is None or not lanes:
        return []
    several = len(lanes) > 1
    parts = []
    for lane, read in lanes:
        part = Ladder.numbered(r for r in route.ladder.rungs if r.lane == lane.name) if several else route.ladder
        grants = None
        if read is not None:
            try:
                grants = GrantsCache(_cache_path(config, lane), key=lane.grants_key).get(clock.now(), read)
            except SshLoginRefused:
                raise  # nothing will work until someone acts: stop before anything is journaled or queued
            except SchedulerError as exc:
                warnings.append(
                    f"could not read what {_table(lane)}'s cluster grants ({exc}); its rungs go ahead unchecked (a "
                    "refused rung is still skipped when sbatch refuses it)"
                    if several
                    else f"could not read what the cluster grants ({exc}); submitting without the check (a refused "
                    "rung is still skipped when sbatch refuses it)"
                )
        if grants is not None:
            try:
                check_lane(_table(lane), grants, partition=lane.partition, account=lane.account)
            except ConfigError as exc:
                return Check(warnings=tuple(warnings), refused=exc)
        parts.append(_Part(lane, part, grants, _table(lane) if several else "[fellows]"))
    return parts


def _judged(
    config: Config, route: Route, parts: Sequence[_Part], found: Sequence[LadderCheck | None], warnings: list[str]
) -> Check:
    """What the rungs' checks decide: on one lane, the preflight's judgement (a pin's rung, the whole ladder); across
    several, the kept rungs joined in order, refused when none is left."""
    if len(parts) == 1:
        [part], [check] = parts, found
        if check is None:
            return Check(warnings=tuple(warnings))  # not checked: a fake has no grants, or they could not be read
        try:
            judged = preflight(part.ladder, check, pinned=route.pinned, next_lane=config.after_ladder)
        except SubmitRejected as exc:
            return Check(warnings=tuple(warnings), refused=exc)
        notes = (*(s for s in judged.note.split("; ") if s), *judged.warnings)
        return Check(judged.ladder, judged.note, notes, tuple(warnings))
    if not parts or route.ladder is None:
        return Check(warnings=tuple(warnings))  # a handoff lane pinned: nothing queued on SLURM
    kept: list[Rung] = []
    skipped: list[str] = []
    remarks: list[str] = []
    for part, check in zip(parts, found, strict=True):
        if check is None:
            kept.extend(part.ladder.rungs)
            continue
        kept.extend(check.rungs)
        on = "" if part.lane.name == config.fellows.name else f" on {part.lane.name}"
        skipped.extend(f"{s.why}{on}" for s in check.skipped)
        remarks.extend(check.warnings)
    if not kept:
        why = "; ".join(w.removeprefix("skipping ") for w in skipped)
        paid = config.after_ladder
        instead = f"; to run it on {paid}, submit it with --pin {paid}" if paid else ""
        rungs = ", ".join(r.where for r in route.ladder.rungs)
        return Check(
            warnings=tuple(warnings),
            refused=SubmitRejected(
                f"no rung of any cluster ({rungs}) can ever start this job ({why}); nothing was queued and nothing "
                f"handed to a paid lane: change --gpus/--time{instead}"
            ),
        )
    return Check(Ladder.numbered(kept), "; ".join(skipped), (*skipped, *remarks), tuple(warnings))


def _missing_credentials(config: Config, paid: str | None) -> LaneError | None:
    """Why the lane this dispatch may be handed to (``Route.paid``) cannot be reached: a gcp-batch lane with no
    Google credentials (CredentialsMissing, exit 11), or without the [gcp] extra; None when it can (or there is
    none): the lane's own ``check_reachable``."""
    if paid is None:
        return None
    try:
        config.lane(paid).check_reachable()
    except LaneError as exc:
        return exc
    return None


def _table(lane: LadderLane) -> str:
    return "[fellows]" if lane.name == "fellows" else f"[lanes.{lane.name}]"


def _cache_path(config: Config, lane: LadderLane) -> Path:
    """Each cluster's grants in a file of its own (fellows' keeps its old name)."""
    return config.state_dir / ("grants.json" if lane.name == config.fellows.name else f"grants-{lane.name}.json")


# --------------------------------------------------------------------------- the grants cache
def grants_to_json(grants: Grants) -> dict[str, Any]:
    """``grants`` as plain JSON values (sets become sorted lists)."""
    return {
        "user": grants.user,
        "associations": [{**attrs.asdict(a, recurse=False), "qos": sorted(a.qos)} for a in grants.associations],
        "qos": [{**attrs.asdict(q, recurse=False), "flags": sorted(q.flags)} for q in grants.qos.values()],
        **({} if grants.partitions is None else {"partitions": sorted(grants.partitions)}),
    }


def grants_from_json(data: dict[str, Any]) -> Grants:
    """The inverse of ``grants_to_json``; KeyError, TypeError or ValueError on a malformed value."""
    associations = tuple(Association(**{**a, "qos": frozenset(a["qos"])}) for a in data["associations"])
    qos = {q["name"]: QosInfo(**{**q, "flags": frozenset(q["flags"])}) for q in data["qos"]}
    partitions = data.get("partitions")
    return Grants(
        user=str(data["user"]),
        associations=associations,
        qos=qos,
        partitions=None if partitions is None else frozenset(partitions),
    )


@attrs.frozen
class GrantsCache:
    """Grants read from the cluster, kept in one JSON file for ``ttl_seconds`` per user and cluster."""

    path: Path
    key: str
    """Whose grants on which cluster (user and SLURM_CONF): a cache for another never answers."""
    ttl_seconds: float = GRANTS_TTL_SECONDS

    def get(self, now: float, read: Callable[[], Grants]) -> Grants:
        """The cached grants if fresh, else ``read()`` (stored for the next caller)."""
        cached = self._load(now)
        if cached is not None:
            return cached
        grants = read()
        self._store(now, grants)
        return grants

    def _load(self, now: float) -> Grants | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            at = float(data["at"])
            if data["key"] != self.key or not math.isfinite(at) or not 0 <= now - at < self.ttl_seconds:
                return None
            return grants_from_json(data["grants"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.info("grants cache %s unreadable (%s); reading the cluster again", self.path, exc)
            return None

    def _store(self, now: float, grants: Grants) -> None:
        data = {"key": self.key, "at": now, "grants": grants_to_json(grants)}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, self.path)  # atomic: a concurrent submit reads the old file or the new, never half
        except OSError as exc:
            log.info("could not write the grants cache %s: %s", self.path, exc)
            tmp.unlink(missing_ok=True)


def _never_paid_words(config: Config, route: Route, why: str | None) -> tuple[str | None, str | None]:
    """What ``submit`` says of a job the ``[budget]`` can never pay for, even with nothing spent (``why``, as
    ``core/budget.py``: ``never_paid`` says it: over ``max_paid_gpu_hours_per_job``, no time limit, its worst case
    alone over a day or a month): pinned to a paid lane,
    under ``on_budget = "wait"`` a refusal (it could only wait for ever; nothing is queued; under "refuse" the gate
    ends it NO_BUDGET at once, exit 12, as any pin over the budget); on the ladder, a note (it walks the free rungs
    only). (None, None) for a job the budget can pay once its windows have room, or one no paid lane may take."""
    name, pin = route.paid, route.pin
    if name is None or why is None:
        return None, None
    if pin is not None:
        refusal = f"{why}: lane {pin} can never run it under [budget] (it would wait for ever); nothing was queued"
        return (None if config.budget.refuse else refusal), None
    then = "it ends NO_BUDGET there" if config.budget.refuse else "it waits on the last one until [budget] changes"
    return None, f"{why}: it can never be handed to lane {name}; it walks the free rungs only ({then})"
