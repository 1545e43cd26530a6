"""``fellows-fsm ladder``: the configured ladder judged against what the cluster grants this user, as JSON or tables.

Works on values read once (the config, the grants); it asks SLURM nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.config.file import Config
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.accounting import Grants, QosInfo, check_ladder
from fellows_fsm.ui.words import gpu_words, span

__all__ = ["ClusterGrants", "LadderReport", "LadderRow", "ladder_report", "ladder_table"]


@attrs.frozen
class LadderRow:
    """One rung of the configured ladder as the cluster sees it."""

    rung: Rung
    granted: bool
    info: QosInfo | None
    skipped: str | None
    """Why the given job could never start on this rung, or None."""


@attrs.frozen
class ClusterGrants:
    """What one SLURM lane (cluster) grants this user there."""

    cluster: str
    user: str
    granted: tuple[QosInfo, ...]


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
    clusters: tuple[ClusterGrants, ...] = ()
    """Each SLURM lane's grants, fellows first (``granted`` is fellows')."""

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object (``user``, ``granted``, ``ladder``, ``warnings``, ``worst_case_seconds``;
        with several clusters also ``clusters``, each one's ``user`` and ``granted``, and each rung's ``cluster``)."""
        several = len(self.clusters) > 1
        out: dict[str, Any] = {
            "user": self.user,
            "job": {"gpus": self.spec.gpus, "time_limit_seconds": self.spec.time_limit_seconds},
            "granted": [_qos_json(q) for q in self.granted],
            "ladder": [
                {
                    "qos": r.rung.qos,
                    **({"cluster": r.rung.lane} if several else {}),
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
        if several:
            out["clusters"] = [
                {"cluster": c.cluster, "user": c.user, "granted": [_qos_json(q) for q in c.granted]}
                for c in self.clusters
            ]
        return out


def _qos_json(info: QosInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "priority": info.priority,
        "max_wall_seconds": info.max_wall_seconds,
        "max_gpus_per_user": info.max_gpus_per_user,
        "grp_gpus": info.grp_gpus,
    }


def ladder_report(
    config: Config, grants: Grants, spec: JobSpec, *, clusters: Mapping[str, Grants] | None = None
) -> LadderReport:
    """Judge the configured production ladder for ``spec``: ungranted QoS, never-fitting rungs, shared caps.

    ``grants`` are fellows'; ``clusters`` every other SLURM lane's by name (each lane's rungs are judged on its own
    cluster's grants). Without ``clusters`` only fellows' ladder is judged.
    """
    lanes = config.slurm_lanes if clusters is not None else (config.fellows,)
    ladder = config.ladder_for("prod") if clusters is not None else config.fellows.ladder
    by_lane = {config.fellows.name: grants, **(clusters or {})}
    warnings: list[str] = []
    rows: list[LadderRow] = []
    fits = False
    for lane in lanes:
        lane_rows, lane_warnings, lane_fits = _judge(
            lane,
            [r for r in ladder.rungs if r.lane == lane.name],
            by_lane[lane.name],
            spec,
            first=lane is config.fellows,
        )
        rows += lane_rows
        warnings += lane_warnings
        fits = fits or lane_fits
    if not fits and any(r.granted for r in rows):
        warnings.append(
            "no rung of the ladder can ever start this job: fellows-fsm submit refuses it (exit 5) and hands "
            "nothing to a paid lane; --pin <lane> sends it there on purpose"
        )
    debug = config.fellows.debug_qos
    if debug is not None and debug not in grants.granted:
        warnings.append(f"debug_qos {debug} is not granted to {grants.user}: debug dispatches skip it")
    return LadderReport(
        user=grants.user,
        rows=tuple(rows),
        granted=_granted(grants),
        warnings=tuple(warnings),
        spec=spec,
        worst_case_seconds=ladder.worst_case_seconds,
        debug_qos=debug,
        clusters=tuple(
            ClusterGrants(lane.name, by_lane[lane.name].user, _granted(by_lane[lane.name])) for lane in lanes
        ),
    )


def _granted(grants: Grants) -> tuple[QosInfo, ...]:
    return tuple(grants.qos.get(name, QosInfo(name)) for name in sorted(grants.granted))


def _judge(
    lane: SlurmSettings, rungs: list[Rung], grants: Grants, spec: JobSpec, *, first: bool
) -> tuple[list[LadderRow], list[str], bool]:
    """One SLURM lane's rungs on its own cluster's grants: the rows, the warnings, and whether any rung fits."""
    granted_names = grants.granted
    on = "" if first else f" on {lane.name}"
    table = "[fellows]" if first else f"[lanes.{lane.name}]"
    warnings: list[str] = []
    usable = [r for r in rungs if r.qos in granted_names]
    for rung in rungs:
        if rung.qos not in granted_names:
            warnings.append(
                f"{rung.qos} is on the ladder but not granted to {grants.user}{on}: fellows-fsm submit refuses every "
                f"dispatch (exit 3) until you remove it from {table} or an admin grants it"
            )
    skipped: dict[str, str] = {}
    fits = False
    if usable:
        checked = check_ladder(
            Ladder(tuple(Rung(i, r.qos, r.park_cap_seconds) for i, r in enumerate(usable))), grants, spec
        )
        skipped = {s.rung.qos: s.why for s in checked.skipped}
        warnings.extend(f"{lane.name}: {m}" if on else m for m in checked.messages)
        fits = bool(checked.rungs)
    else:
        warnings.append(f"no QoS of the ladder{on} is granted to {grants.user}: fellows-fsm submit refuses (exit 3)")
    rows = [LadderRow(r, r.qos in granted_names, grants.qos.get(r.qos), skipped.get(r.qos)) for r in rungs]
    return rows, warnings, fits


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
    """What each cluster grants this user, the effective ladder with its caps (and, with several clusters, each
    rung's), and the warnings."""
    several = len(report.clusters) > 1
    each = report.clusters if several else (ClusterGrants("", report.user, report.granted),)
    tables: list[RenderableType] = []
    for cluster in each:
        on = f" on {cluster.cluster}" if several else ""
        grants = Table(title=f"QoS granted to {cluster.user}{on}", title_justify="left")
        for header in ("QoS", "priority", "max wall", "GPUs/user", "group GPUs"):
            grants.add_column(header, no_wrap=True)
        for info in cluster.granted:
            grants.add_row(
                info.name,
                str(info.priority),
                _wall(info.max_wall_seconds),
                _limit(info.max_gpus_per_user),
                _limit(info.grp_gpus),
            )
        tables.append(grants)
    job = gpu_words(report.spec.gpus) + (
        f", --time {span(report.spec.time_limit_seconds)}" if report.spec.time_limit_seconds else ""
    )
    ladder = Table(title=f"effective ladder for a job of {job}", title_justify="left")
    headers = ("rung", "cluster", "QoS") if several else ("rung", "QoS")
    for header in (*headers, "park cap", "max wall", "GPUs/user", "verdict"):
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
            *((row.rung.lane,) if several else ()),
            row.rung.qos,
            span(row.rung.park_cap_seconds),
            _wall(rung_info.max_wall_seconds if rung_info else None),
            _limit(rung_info.max_gpus_per_user if rung_info else None),
            verdict,
        )
    caps = "every cluster's park caps" if several else "the park caps"
    parts: list[RenderableType] = [
        *tables,
        ladder,
        Text(f"worst case before the next lane: {span(report.worst_case_seconds)} (the sum of {caps})"),
    ]
    parts += [Text(f"warning: {w}", style="yellow") for w in report.warnings]
    return Group(*parts)
