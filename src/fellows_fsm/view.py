"""How dispatches look: the live panel, the status and history tables, the ladder report, a dispatch's path.

Pure functions from values (journal rows, steps, a Dispatch read but never driven, grants) to rich renderables,
JSON-ready dicts or diagram text. The time comes in as ``now``; nothing here prints, polls, or writes.
"""

from __future__ import annotations

import math
import re
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import import_module
from importlib.util import find_spec
from typing import Any

import attrs
from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fellows_fsm.config import Config, Ladder, Rung
from fellows_fsm.core import Dispatch, Step, machine_definition, state_label
from fellows_fsm.core.vocab import (
    FAILED_TO_GCP,
    HANDED_OFF,
    HANDING_OFF,
    HANDOFF_FAILED,
    NO_LANE_LEFT,
    REFUSED,
    RUNNING,
    WITHDRAWN,
)
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal import DispatchRow, HandoffRow, JobRow
from fellows_fsm.scheduler import JobSpec, ReasonGroup, classify_reason
from fellows_fsm.slurm.accounting import Grants, QosInfo, check_ladder

__all__ = [
    "HistoryEntry",
    "LadderReport",
    "Snapshot",
    "dispatch_json",
    "dispatch_panel",
    "dot_source",
    "explain_reason",
    "history_entries",
    "history_table",
    "iso_utc",
    "ladder_report",
    "ladder_table",
    "path_mermaid",
    "span",
    "status_table",
    "watch_table",
]

_GONE_FINAL = {HANDED_OFF: "handed off", HANDOFF_FAILED: "handoff failed", WITHDRAWN: "withdrawn"}


# --------------------------------------------------------------------------- time
def iso_utc(at: float) -> str:
    """``at`` (epoch seconds) as an ISO-8601 UTC string, e.g. ``2026-11-30T12:00:00+00:00``."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def _clock(at: float) -> str:
    """Local wall-clock time of ``at``, e.g. ``12:00:05``."""
    return datetime.fromtimestamp(at).strftime("%H:%M:%S")  # local time: what users read


def _when(at: float) -> str:
    """Local date and time of ``at``, e.g. ``2026-11-30 12:00:05``."""
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def span(seconds: float) -> str:
    """A duration for people: ``12s``, ``4m 05s``, ``1h 02m 03s``, ``2d 03h 00m`` (rounded up to the second)."""
    total = max(0, math.ceil(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


# --------------------------------------------------------------------------- pending reasons in words
_GROUP_WORDS: Mapping[ReasonGroup, str] = {
    ReasonGroup.NOT_EVALUATED: "queued; SLURM has not looked at it yet",
    ReasonGroup.OWN_CAP: "your own {qos} limit is reached; it clears when your jobs on {qos} end",
    ReasonGroup.SHARED_CAP: "the {qos} group limit, shared with other users, is full; the next rung may share it",
    ReasonGroup.CONTENTION: "waiting for free resources on the cluster",
    ReasonGroup.NEVER_FITS: "{qos} can never start this job; moving to the next rung",
    ReasonGroup.INVALID: "the cluster refuses {qos} for this job; moving to the next rung",
    ReasonGroup.HELD: "held; it will not start until released (scontrol release {job})",
    ReasonGroup.WAITING: "waiting for a dependency or a begin time",
    ReasonGroup.OTHER: "pending",
}
_REASON_WORDS: Mapping[str, str] = {
    "QOSMaxGRESPerUser": "your own {qos} GPU cap is full; it clears when your GPU jobs on {qos} end",
    "Resources": "waiting for free GPUs on the nodes",
    "Priority": "waiting behind higher-priority jobs",
    "QOSMaxWallDurationPerJobLimit": "the job's --time is over the MaxWall of {qos}; it can never start there",
    "QOSGrpGRES": "the shared GPU pool of {qos} is full (all users)",
    "AssocGrpGRES": "your account's GPU budget is full; every rung shares it",
}


def explain_reason(reason: str | None, qos: str | None = None, job_id: str | None = None) -> str:
    """A SLURM pending reason in plain words, e.g. QOSMaxGRESPerUser on high-eur -> ``your own high-eur GPU cap
    is full; ...``."""
    values = {"qos": qos or "this QoS", "job": job_id or "<job>"}
    if reason is not None and reason in _REASON_WORDS:
        return _REASON_WORDS[reason].format_map(values)
    return _GROUP_WORDS[classify_reason(reason)].format_map(values)


# --------------------------------------------------------------------------- one dispatch, as seen now
@attrs.frozen
class Snapshot:
    """What the live view shows of one dispatch at one moment."""

    dispatch_id: str
    name: str
    gpus: int
    time_limit_seconds: int | None
    label: str
    lane: str
    qos: str | None
    job_id: str | None
    job_state: str | None
    """SLURM's own state word from the latest observation (PENDING, RUNNING, ...)."""
    reason: str | None
    rung_index: int
    ladder: tuple[str, ...]
    deadline: float | None
    """When the current rung's window closes; None when pinned, final or not on the ladder."""
    worst_case: float | None
    """When the dispatch is handed on at the latest (the current deadline plus every later cap)."""
    final: bool
    outcome: str = ""
    pinned: bool = False

    @classmethod
    def of_dispatch(cls, d: Dispatch, *, lane: str = "fellows") -> Snapshot:
        """Read (never drive) a live Dispatch."""
        obs = d.observation if d.observation is not None and d.observation.job_id == d.job_id else None
        walking = not d.pinned and not d.is_final
        later = math.fsum(r.park_cap_seconds for r in d.ladder.rungs[d.rung_index + 1 :])
        return cls(
            dispatch_id=d.id,
            name=d.spec.name,
            gpus=d.spec.gpus,
            time_limit_seconds=d.spec.time_limit_seconds,
            label=d.label,
            lane=lane,
            qos=d.rung.qos,
            job_id=d.job_id,
            job_state=obs.state if obs is not None else None,
            reason=obs.reason if obs is not None else None,
            rung_index=d.rung_index,
            ladder=d.ladder.qos_names,
            deadline=d.deadline if walking else None,
            worst_case=d.deadline + later if walking else None,
            final=d.is_final,
            pinned=d.pinned,
        )

    @classmethod
    def of_row(cls, row: DispatchRow, handoff: HandoffRow | None = None) -> Snapshot:
        """A dispatch as the journal has it (no live observation, no deadlines)."""
        ladder = tuple(str(r["qos"]) for r in row.ladder)
        rung_index = ladder.index(row.qos) if row.qos in ladder else 0
        return cls(
            dispatch_id=row.id,
            name=str(row.spec.get("name", "")),
            gpus=int(row.spec.get("gpus", 0)),
            time_limit_seconds=row.spec.get("time_limit_seconds"),
            label=row.label,
            lane=handoff.lane if handoff is not None else row.lane,
            qos=row.qos,
            job_id=row.job_id,
            job_state=None,
            reason=None,
            rung_index=rung_index,
            ladder=ladder,
            deadline=None,
            worst_case=None,
            final=row.final,
            outcome=row.outcome,
            pinned=row.pinned,
        )


def dispatch_json(row: DispatchRow, handoff: HandoffRow | None = None) -> dict[str, Any]:
    """One dispatch as a JSON object: ``dispatch_id``, ``state``, ``lane``, ``qos``, ``slurm_job_id`` and more."""
    return {
        "dispatch_id": row.id,
        "name": row.spec.get("name"),
        "state": row.label,
        "lane": handoff.lane if handoff is not None else row.lane,
        "qos": row.qos,
        "slurm_job_id": row.job_id,
        "final": row.final,
        "outcome": row.outcome,
        "intent": row.intent,
        "pinned": row.pinned,
        "gpus": row.spec.get("gpus"),
        "created_at": iso_utc(row.created_at),
        "updated_at": iso_utc(row.updated_at),
        "handoff_exit_status": handoff.exit_status if handoff is not None else None,
    }


def gpu_words(count: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def shown_state(snap: Snapshot) -> str:
    """The state as a user should read it: what happened, not the machine's last state.

    The journal and ``--json`` keep the machine's label (``FAILED_TO_GCP`` with outcome ``handed-off``); the
    tables and the live view say ``HANDED_OFF``; a first submit SLURM refused reads ``REFUSED``, not the
    ``SUBMITTED(...)`` it never reached.
    """
    if snap.label == FAILED_TO_GCP:
        return {
            "handed-off": HANDED_OFF,
            "handoff-failed": HANDOFF_FAILED,
            "no-fallback-lane": NO_LANE_LEFT,
        }.get(snap.outcome, HANDING_OFF)
    if snap.final and snap.outcome.startswith("rejected"):
        return REFUSED
    return snap.label


def _left_ladder(snap: Snapshot) -> bool:
    """True once the dispatch is past every rung: handed (or being handed) to another lane, or refused."""
    return snap.label == FAILED_TO_GCP or snap.lane != "fellows" or (snap.final and snap.outcome.startswith("rej"))


def _ladder_line(snap: Snapshot, next_lane: str | None) -> Text:
    """``high-eur ✗ → normal-eur ● → low-eur → gcp``: the rungs left behind, the current one, those ahead."""
    text = Text()
    current = len(snap.ladder) if _left_ladder(snap) else snap.rung_index
    for i, qos in enumerate(snap.ladder):
        if i:
            text.append(" → ", style="dim")
        if i < current:
            text.append(f"{qos} ✗", style="dim strike")
        elif i == current:
            text.append(f"{qos} ●", style="bold cyan")
        else:
            text.append(qos)
    lane = snap.lane if snap.lane != "fellows" else next_lane
    if lane is not None and not snap.pinned:
        text.append(" → ", style="dim")
        text.append(f"{lane} ●" if current == len(snap.ladder) else lane, style="bold yellow" if current else "yellow")
    return text


def _job_words(snap: Snapshot) -> Text:
    if snap.job_id is None:
        return Text("not queued yet", style="dim")
    text = Text(snap.job_id, style="bold")
    if snap.job_state:
        text.append(f" ({snap.job_state})", style="dim")
    return text


def _headline(snap: Snapshot) -> str:
    limit = f", --time {span(snap.time_limit_seconds)}" if snap.time_limit_seconds else ""
    return f"dispatch {snap.dispatch_id} · {snap.name} ({gpu_words(snap.gpus)}{limit})"


def _state_style(label: str) -> str:
    if label in (RUNNING, HANDED_OFF):
        return "bold green"
    if label in (FAILED_TO_GCP, HANDOFF_FAILED, WITHDRAWN, REFUSED, NO_LANE_LEFT, HANDING_OFF):
        return "bold yellow"
    return "bold cyan"


def dispatch_panel(
    snap: Snapshot,
    *,
    now: float,
    steps: Sequence[HistoryEntry] = (),
    next_lane: str | None = None,
    unreachable_since: float | None = None,
    message: str | None = None,
) -> RenderableType:
    """The live view of one dispatch: rung and QoS, SLURM job, why it waits, park countdown, worst case."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    on_ladder = snap.ladder and not _left_ladder(snap)
    rung = f"   rung {snap.rung_index + 1} of {len(snap.ladder)}" if on_ladder else ""
    state = shown_state(snap)
    grid.add_row("state", Text(state, style=_state_style(state)).append(rung, style="dim"))
    if snap.ladder:
        grid.add_row("ladder", _ladder_line(snap, next_lane))
    grid.add_row("QoS", Text((snap.qos if on_ladder or snap.label == RUNNING else None) or "-"))
    grid.add_row("SLURM job", _job_words(snap))
    if not snap.final:
        if snap.job_state == "PENDING" or (snap.job_id is not None and snap.job_state is None):
            words = explain_reason(snap.reason, snap.qos, snap.job_id) if snap.job_state else "looking..."
            why = Text(words)
            if snap.reason:
                why.append(f"  ({snap.reason})", style="dim")
            grid.add_row("waiting", why)
        if snap.pinned:
            grid.add_row("parks in", Text(f"never: pinned to {snap.qos}", style="dim"))
        elif snap.deadline is not None:
            left = snap.deadline - now
            grid.add_row(
                "parks in",
                Text(span(left) if left > 0 else "now", style="bold" if left > 0 else "bold yellow").append(
                    f"   at {_clock(snap.deadline)}", style="dim"
                ),
            )
        if snap.worst_case is not None and next_lane is not None:
            grid.add_row(
                f"{next_lane} in",
                Text(f"{span(snap.worst_case - now)} at worst", style="yellow").append(
                    f"   at {_clock(snap.worst_case)}", style="dim"
                ),
            )
    elif snap.outcome:
        grid.add_row("outcome", Text(snap.outcome, style=_state_style(snap.label)))
    if unreachable_since is not None:
        grid.add_row(
            "SLURM",
            Text(f"not answering for {span(now - unreachable_since)}; retrying with back-off", style="bold red"),
        )
    if message:
        grid.add_row("", Text(message, style="yellow"))
    panel = Panel(grid, title=_headline(snap), title_align="left", border_style="cyan", expand=False)
    parts: list[RenderableType] = [panel]
    if steps:
        parts.append(_steps_tail(steps))
    return Group(*parts)


def _steps_tail(entries: Sequence[HistoryEntry], keep: int = 6) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(style="dim")
    for entry in entries[-keep:]:
        table.add_row(_clock(entry.at), entry.trigger, f"→ {entry.dest}", entry.detail())
    return table


def watch_table(snaps: Sequence[Snapshot], *, now: float, next_lane: str | None = None) -> RenderableType:
    """Every dispatch a watch drives, one row each, with its countdowns."""
    table = Table(title=f"live dispatches ({len(snaps)})", title_justify="left", expand=False)
    for header in ("dispatch", "name", "state", "QoS", "job", "waiting", "parks in", f"{next_lane or 'next'} in"):
        table.add_column(header, no_wrap=header != "waiting")
    for snap in snaps:
        waiting = explain_reason(snap.reason, snap.qos, snap.job_id) if snap.job_state == "PENDING" else ""
        parks = "pinned" if snap.pinned else (span(snap.deadline - now) if snap.deadline is not None else "")
        worst = span(snap.worst_case - now) if snap.worst_case is not None and next_lane else ""
        table.add_row(
            snap.dispatch_id,
            snap.name,
            Text(shown_state(snap), style=_state_style(shown_state(snap))),
            snap.qos or "-",
            snap.job_id or "-",
            waiting,
            parks,
            worst,
        )
    return table


def status_words(snap: Snapshot) -> str:
    """The state column of ``status``: the shown state with where it is, e.g. ``RUNNING(normal-eur)``."""
    state = shown_state(snap)
    if state == RUNNING and snap.qos:
        return f"{RUNNING}({snap.qos})"
    if state in (HANDED_OFF, HANDOFF_FAILED, HANDING_OFF) and snap.lane != "fellows":
        return f"{state}({snap.lane})"
    return state


def _short_when(at: float, today: str) -> str:
    """``23:37:24`` today, ``11-30 23:37`` on another day."""
    moment = datetime.fromtimestamp(at)
    return moment.strftime("%H:%M:%S") if moment.strftime("%Y-%m-%d") == today else moment.strftime("%m-%d %H:%M")


def status_table(rows: Sequence[Snapshot], *, updated: Mapping[str, float]) -> RenderableType:
    """The journal's dispatches, one row each (``updated`` maps a dispatch id to its last change); fits 80 columns."""
    today = datetime.now().strftime("%Y-%m-%d")
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("dispatch", no_wrap=True)
    table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=24)
    table.add_column("state", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    for snap in rows:
        at = updated.get(snap.dispatch_id)
        words = status_words(snap)
        table.add_row(
            snap.dispatch_id,
            snap.name,
            Text(words, style=_state_style(shown_state(snap)) if snap.final else "cyan"),
            snap.job_id or "-",
            _short_when(at, today) if at is not None else "",
        )
    return table


# --------------------------------------------------------------------------- history
@attrs.frozen
class HistoryEntry:
    """One line of a dispatch's history: a journaled transition, its handoff, or its withdrawal."""

    at: float
    source: str | None
    """The state label left (None for the first submit)."""
    dest: str
    trigger: str
    qos: str | None
    slurm_job_id: str | None
    reason: str | None
    note: str = ""
    source_name: str | None = None
    """The state names (as in the machine), for drawing the path."""
    dest_name: str = ""

    def as_json(self) -> dict[str, Any]:
        """The documented JSON keys: at, from, to, trigger, qos, slurm_job_id, reason, note."""
        return {
            "at": iso_utc(self.at),
            "from": self.source,
            "to": self.dest,
            "trigger": self.trigger,
            "qos": self.qos,
            "slurm_job_id": self.slurm_job_id,
            "reason": self.reason,
            "note": self.note,
        }

    def detail(self) -> str:
        """The job, reason and note of the entry in one short line."""
        parts = []
        if self.slurm_job_id:
            parts.append(f"job {self.slurm_job_id}")
        if self.reason:
            parts.append(self.reason)
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


def _ladder_of(row: DispatchRow) -> Ladder | None:
    return Ladder(tuple(Rung(**r) for r in row.ladder)) if row.ladder else None


def history_entries(
    row: DispatchRow, steps: Sequence[Step], jobs: Sequence[JobRow], handoff: HandoffRow | None
) -> list[HistoryEntry]:
    """Every transition of a dispatch, its handoff (if any) and its withdrawal (if any), oldest first."""
    ladder = _ladder_of(row)
    job_by_rung = {j.rung_index: j.job_id for j in jobs}

    def label(name: str) -> str:
        return state_label(ladder, name) if ladder is not None else name

    entries = []
    for step in steps:
        job_id = step.job_id
        if job_id is None and step.trigger in ("submit", "resubmit"):
            job_id = job_by_rung.get(step.rung_index)  # the job id is journaled once sbatch answers
        entries.append(
            HistoryEntry(
                at=step.at,
                source=label(step.source) if step.source else None,
                dest=label(step.dest),
                trigger=step.trigger,
                qos=step.qos,
                slurm_job_id=job_id,
                reason=step.reason,
                note=step.note,
                source_name=step.source or None,
                dest_name=step.dest,
            )
        )
    if handoff is not None:
        done = handoff.status == "done"
        status = "not finished" if handoff.exit_status is None else f"exit {handoff.exit_status}"
        last = ((handoff.stderr or "").strip().splitlines() or [""])[-1] if not done else ""
        source = FAILED_TO_GCP if entries else None
        entries.append(
            HistoryEntry(
                at=handoff.finished_at or handoff.started_at,
                source=source,
                dest=HANDED_OFF if done else (HANDOFF_FAILED if handoff.exit_status is not None else HANDING_OFF),
                trigger="hand_off",
                qos=None,
                slurm_job_id=None,
                reason=None,
                note=f"{handoff.lane} command {handoff.argv[0]} ...: {status}" + (f": {last}" if last else ""),
                source_name=source,
                dest_name=HANDED_OFF if done else HANDOFF_FAILED,
            )
        )
    if row.outcome in ("withdrawn", "withdrawn-interrupted"):
        source = entries[-1].dest if entries else None
        entries.append(
            HistoryEntry(
                at=row.updated_at,
                source=source,
                dest=WITHDRAWN,
                trigger="withdraw",
                qos=row.qos,
                slurm_job_id=row.job_id,
                reason=None,
                note="fellows-fsm cancel" if row.outcome == "withdrawn" else "Ctrl-C while it was being queued",
                source_name=entries[-1].dest_name if entries else None,
                dest_name=WITHDRAWN,
            )
        )
    return entries


def history_table(row: DispatchRow, entries: Sequence[HistoryEntry]) -> RenderableType:
    """Every transition of a dispatch with time, from, to, trigger, QoS, SLURM job and pending reason."""
    day = datetime.fromtimestamp(entries[0].at if entries else row.created_at).strftime("%Y-%m-%d")
    table = Table(
        title=f"dispatch {row.id} · {row.spec.get('name', '')} · {day} (local time)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("time", no_wrap=True)
    table.add_column("trigger", no_wrap=True)
    table.add_column("to", style="cyan", no_wrap=True)
    table.add_column("QoS", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("reason, note", min_width=20, ratio=1, overflow="fold")
    for entry in entries:
        reason = Text()
        if entry.reason:
            reason.append(entry.reason)
            if entry.trigger == "park":
                reason.append(f": {explain_reason(entry.reason, entry.qos)}", style="dim")
        if entry.note:
            reason.append(("  " if entry.reason else "") + entry.note, style="italic dim")
        table.add_row(
            _clock(entry.at),
            entry.trigger,
            entry.dest.split("(", 1)[0] if entry.qos and f"({entry.qos})" in entry.dest else entry.dest,
            entry.qos or "",
            entry.slurm_job_id or "",
            reason,
        )
    return table


# --------------------------------------------------------------------------- the ladder against the grants
@attrs.frozen
class LadderRow:
    """One rung of the configured ladder as the cluster sees it."""

    rung: Rung
    granted: bool
    info: QosInfo | None
    skipped: str | None
    """Why the given job could never start on this rung, or None."""


@attrs.frozen
class LadderReport:
    """The configured ladder judged against what the cluster grants this user."""

    user: str
    rows: tuple[LadderRow, ...]
    granted: tuple[QosInfo, ...]
    warnings: tuple[str, ...]
    spec: JobSpec
    worst_case_seconds: float
    debug_qos: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object (``user``, ``granted``, ``ladder``, ``warnings``, ``worst_case_seconds``)."""
        return {
            "user": self.user,
            "job": {"gpus": self.spec.gpus, "time_limit_seconds": self.spec.time_limit_seconds},
            "granted": [_qos_json(q) for q in self.granted],
            "ladder": [
                {
                    "qos": r.rung.qos,
                    "park_cap_seconds": r.rung.park_cap_seconds,
                    "granted": r.granted,
                    "usable": r.granted and r.skipped is None,
                    "skipped": r.skipped,
                    **({k: v for k, v in _qos_json(r.info).items() if k != "name"} if r.info else {}),
                }
                for r in self.rows
            ],
            "debug_qos": self.debug_qos,
            "worst_case_seconds": self.worst_case_seconds,
            "warnings": list(self.warnings),
        }


def _qos_json(info: QosInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "priority": info.priority,
        "max_wall_seconds": info.max_wall_seconds,
        "max_gpus_per_user": info.max_gpus_per_user,
        "grp_gpus": info.grp_gpus,
    }


def ladder_report(config: Config, grants: Grants, spec: JobSpec) -> LadderReport:
    """Judge the configured production ladder for ``spec``: ungranted QoS, never-fitting rungs, shared caps."""
    ladder = config.fellows.ladder
    granted_names = grants.granted
    warnings: list[str] = []
    usable = [r for r in ladder.rungs if r.qos in granted_names]
    for rung in ladder.rungs:
        if rung.qos not in granted_names:
            warnings.append(
                f"{rung.qos} is on the ladder but not granted to {grants.user}: fellows-fsm submit refuses every "
                "dispatch (exit 3) until you remove it from [fellows] or an admin grants it"
            )
    skipped: dict[str, str] = {}
    if usable:
        checked = check_ladder(
            Ladder(tuple(Rung(i, r.qos, r.park_cap_seconds) for i, r in enumerate(usable))), grants, spec
        )
        skipped = {s.rung.qos: s.why for s in checked.skipped}
        warnings.extend(checked.messages)
        if not checked.rungs:
            warnings.append(
                "no rung of the ladder can ever start this job: fellows-fsm submit refuses it (exit 5) and hands "
                "nothing to a paid lane; --pin <lane> sends it there on purpose"
            )
    else:
        warnings.append(f"no QoS of the ladder is granted to {grants.user}: fellows-fsm submit refuses (exit 3)")
    debug = config.fellows.debug_qos
    if debug is not None and debug not in granted_names:
        warnings.append(f"debug_qos {debug} is not granted to {grants.user}: debug dispatches skip it")
    rows = tuple(LadderRow(r, r.qos in granted_names, grants.qos.get(r.qos), skipped.get(r.qos)) for r in ladder.rungs)
    granted = tuple(grants.qos.get(name, QosInfo(name)) for name in sorted(granted_names))
    return LadderReport(
        user=grants.user,
        rows=rows,
        granted=granted,
        warnings=tuple(warnings),
        spec=spec,
        worst_case_seconds=ladder.worst_case_seconds,
        debug_qos=debug,
    )


def _limit(value: int | None, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _wall(seconds: int | None) -> str:
    """A limit in the largest whole units: ``7d``, ``1d 12h``, ``4h``, else the full span."""
    if seconds is None:
        return "-"
    days, rest = divmod(seconds, 86_400)
    if days and rest % 3600 == 0:
        return f"{days}d" + (f" {rest // 3600}h" if rest else "")
    if not days and rest % 3600 == 0:
        return f"{rest // 3600}h"
    return span(seconds)


_SKIP_WORDS = (
    ("MaxWall", "skipped: --time over max wall"),
    ("per-user cap", "skipped: over GPUs/user"),
    ("group cap", "skipped: over group GPUs"),
)


def ladder_table(report: LadderReport) -> RenderableType:
    """What the cluster grants this user, the effective ladder with its caps, and the warnings."""
    grants = Table(title=f"QoS granted to {report.user}", title_justify="left")
    for header in ("QoS", "priority", "max wall", "GPUs/user", "group GPUs"):
        grants.add_column(header, no_wrap=True)
    for info in report.granted:
        grants.add_row(
            info.name,
            str(info.priority),
            _wall(info.max_wall_seconds),
            _limit(info.max_gpus_per_user),
            _limit(info.grp_gpus),
        )
    job = gpu_words(report.spec.gpus) + (
        f", --time {span(report.spec.time_limit_seconds)}" if report.spec.time_limit_seconds else ""
    )
    ladder = Table(title=f"effective ladder for a job of {job}", title_justify="left")
    for header in ("rung", "QoS", "park cap", "max wall", "GPUs/user", "verdict"):
        ladder.add_column(
            header, no_wrap=header != "verdict", ratio=1 if header == "verdict" else None, overflow="fold"
        )
    for row in report.rows:
        rung_info = row.info
        if not row.granted:
            verdict = Text("not granted: skipped", style="red")
        elif row.skipped:
            # The full reason is in the warnings under the table; the cell says which limit, short.
            short = next(
                (words for key, words in _SKIP_WORDS if key in row.skipped), "skipped: it can never start here"
            )
            verdict = Text(short, style="yellow")
        else:
            verdict = Text("usable", style="green")
        ladder.add_row(
            str(row.rung.index + 1),
            row.rung.qos,
            span(row.rung.park_cap_seconds),
            _wall(rung_info.max_wall_seconds if rung_info else None),
            _limit(rung_info.max_gpus_per_user if rung_info else None),
            verdict,
        )
    parts: list[RenderableType] = [
        grants,
        ladder,
        Text(f"worst case before the next lane: {span(report.worst_case_seconds)} (the sum of the park caps)"),
    ]
    parts += [Text(f"warning: {w}", style="yellow") for w in report.warnings]
    return Group(*parts)


# --------------------------------------------------------------------------- diagrams of a dispatch's path
def _visits(entries: Sequence[HistoryEntry]) -> tuple[dict[str, list[str]], dict[tuple[str, str], list[str]]]:
    """State names -> the times entered; (source, dest) names -> the times taken ('[*]' is the start)."""
    states: dict[str, list[str]] = defaultdict(list)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for entry in entries:
        when = _clock(entry.at)
        states[entry.dest_name].append(when)
        edges[(entry.source_name or "[*]", entry.dest_name)].append(when)
    return states, edges


def _graph_states(ladder: Ladder, entries: Sequence[HistoryEntry]) -> list[dict[str, Any]]:
    states, _ = machine_definition(ladder)
    visits, _ = _visits(entries)
    for state in states:
        times = visits.get(state["name"])
        if times:
            state["label"] = f"{state['label']}\\n{', '.join(times)}"
    return states


def path_mermaid(ladder: Ladder, entries: Sequence[HistoryEntry], *, title: str) -> str:
    """The mermaid diagram of ``ladder`` with a dispatch's path marked: visited states, taken edges, times."""
    from fellows_fsm.diagram import mermaid  # noqa: PLC0415 - diagram imports GraphMachine; only this needs it

    visits, edges = _visits(entries)
    current = entries[-1].dest_name if entries else None
    out: list[str] = []
    state_line = re.compile(r'^(\s*)state "([^"]*)" as (\S+)$')
    edge_line = re.compile(r"^(\s*)(\S+) --> (\S+): (.*)$")
    start_line = re.compile(r"^(\s*)\[\*\] --> (\S+)$")
    for line in mermaid(ladder, title=title).splitlines():
        if match := state_line.match(line):
            indent, label, name = match.groups()
            times = visits.get(name)
            out.append(f'{indent}state "{label} · {", ".join(times)}" as {name}' if times else line)
        elif match := edge_line.match(line):
            indent, src, dst, label = match.groups()
            taken = edges.get((src, dst))
            out.append(f"{indent}{src} --> {dst}: {label} ✔ {', '.join(taken)}" if taken else line)
        elif (match := start_line.match(line)) and edges.get(("[*]", match[2])):
            out.append(f"{line}: submit ✔ {', '.join(edges[('[*]', match[2])])}")
        else:
            out.append(line)
    extra = [name for name in visits if name not in {s["name"] for s in machine_definition(ladder)[0]}]
    for entry in entries:
        if entry.dest_name in extra and entry.source_name:
            out.append(f"  {entry.source_name} --> {entry.dest_name}: {entry.trigger} ✔ {_clock(entry.at)}")
    visited = [name for name in visits if name != current]
    out.append("  classDef visited fill:#dbeafe,stroke:#2563eb,stroke-width:2px")
    out.append("  classDef current fill:#bbf7d0,stroke:#15803d,stroke-width:3px")
    if visited:
        out.append(f"  class {','.join(visited)} visited")
    if current is not None:
        out.append(f"  class {current} current")
    return "\n".join(out) + "\n"


GRAPHVIZ_MISSING = (
    "this format needs the graphviz Python package: pip install 'fellows-fsm[graphviz]' "
    "(and for svg Debian's graphviz: apt-get install graphviz)"
)
DOT_MISSING = "--format svg needs Graphviz's dot program: apt-get install graphviz (Debian/Ubuntu)"


def dot_source(ladder: Ladder, entries: Sequence[HistoryEntry] = (), *, title: str = "dispatch lifecycle") -> str:
    """The Graphviz DOT of ``ladder`` (transitions' GraphMachine, graphviz engine), a dispatch's path marked.

    Raises FellowsError naming what to install when the graphviz Python package is missing.
    """
    if find_spec("graphviz") is None:
        raise FellowsError(GRAPHVIZ_MISSING)
    from fellows_fsm.diagram import graph_machine  # noqa: PLC0415 - only diagrams need transitions' graphs

    _, transitions = machine_definition(ladder)
    visits, edges = _visits(entries)
    current = entries[-1].dest_name if entries else None
    known = {s["name"] for s in machine_definition(ladder)[0]}
    states = _graph_states(ladder, entries)
    for entry in entries:  # handed off / withdrawn are outside the ladder machine: drawn as extra states
        if entry.dest_name not in known:
            known.add(entry.dest_name)
            states.append({"name": entry.dest_name, "label": f"{entry.dest}\\n{_clock(entry.at)}"})
            if entry.source_name:
                transitions = [
                    *transitions,
                    {"trigger": entry.trigger, "source": entry.source_name, "dest": entry.dest_name},
                ]

    machine, model = graph_machine(ladder, title=title, engine="graphviz", states=states, transitions=transitions)
    graph = machine.model_graphs[id(model)]
    for src, dst in edges:
        if src != "[*]":
            graph.set_previous_transition(src, dst)
    for name in visits:
        graph.set_node_style(name, "previous")
    if current is not None:
        graph.set_node_style(current, "active")
    digraph = model.get_graph()  # get_graph is bound onto the model by GraphMachine
    for i, line in enumerate(digraph.body):
        match = re.match(r'^\t(\S+) -> (\S+) \[label="(.*?)"(.*)\]$', line.rstrip("\n"))
        if match is None:
            continue
        src, dst, label, rest = match.groups()
        taken = edges.get((src, dst))
        if taken:
            digraph.body[i] = f'\t{src} -> {dst} [label="{label}\\n✔ {", ".join(taken)}"{rest} penwidth=2.5]\n'
    source: str = digraph.source
    return source


def svg(dot: str) -> bytes:
    """Render DOT text to SVG with Graphviz's ``dot``; FellowsError naming what to install if it is missing."""
    if find_spec("graphviz") is None:
        raise FellowsError(GRAPHVIZ_MISSING)
    if shutil.which("dot") is None:
        raise FellowsError(DOT_MISSING)
    graphviz = import_module("graphviz")  # the optional [graphviz] extra
    rendered: bytes = graphviz.Source(dot).pipe(format="svg")
    return rendered
