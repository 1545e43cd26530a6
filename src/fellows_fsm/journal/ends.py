"""How each free job ended, in the journal's ``ends`` table: one row per ended job, written in the transaction of
its end step (``write_end``), read back as ``JobEnded`` by the views, ``wait`` and ``spend``."""

from __future__ import annotations

from typing import Any

import attrs

from fellows_fsm.core.ends import EndMark

__all__ = ["FREE_SUMS", "JobEnded", "write_end"]


@attrs.frozen(kw_only=True)
class JobEnded(EndMark):
    """A free job's end as the journal keeps it: its end step's mark (result, exit code, SLURM's word, when, how long,
    its GPUs; ``gpu_hours``), and whose."""

    dispatch_id: str


def write_end(db: Any, dispatch_id: str, mark: EndMark) -> None:
    """A free job's end step, in its ends row (once: a dispatch ends once)."""
    db.execute(
        "INSERT OR REPLACE INTO ends (dispatch_id, lane, job_id, result, exit_code, slurm_state, started_at, ended_at,"
        " elapsed_seconds, gpus, note) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            dispatch_id,
            mark.lane,
            mark.job_id,
            mark.result,
            mark.exit_code,
            mark.slurm_state,
            mark.started_at,
            mark.ended_at,
            mark.elapsed_seconds,
            mark.gpus,
            mark.note,
        ),
    )


FREE_SUMS = (
    "SELECT lane, COUNT(*) AS runs, TOTAL(gpus * COALESCE(elapsed_seconds, 0.0)) / 3600.0 AS gpu_hours"
    " FROM {source} WHERE ended_at >= ? GROUP BY lane ORDER BY lane"
)
"""The free GPU-hours per lane of the jobs that ended since a time (``Journal.free_sums``; ``{source}``: the ends
table, or its union with the archive's)."""
