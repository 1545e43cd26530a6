"""``fellows-fsm ladder``: the configured ladder judged against what the cluster grants this user, as JSON or tables.

Works on values read once (the config, the grants); it asks SLURM nothing itself.
"""

from __future__ import annotations

from typing import Any

import attrs
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fellows_fsm.config.file import Config
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.accounting import Grants, QosInfo, check_ladder
from fellows_fsm.ui.words import gpu_words, span

__all__ = ["LadderReport", "LadderRow", "ladder_report", "ladder_table"]


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
