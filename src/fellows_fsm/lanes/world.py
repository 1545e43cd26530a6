"""The world behind a config, as ``fellows-fsm config check`` checks it: every SLURM lane's cluster (side by side,
each bounded: lanes/slurm/world.py), every lane a dispatch is handed to usable from here (its library, its
credentials: ``check_reachable``; its program on PATH: ``warnings``). One line per problem; nothing is sent to a
paid lane, nothing submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from fellows_fsm.errors import LaneError
from fellows_fsm.lanes.slurm.world import cluster_problems

if TYPE_CHECKING:
    from fellows_fsm.lanes.base import LaneSettings
    from fellows_fsm.lanes.slurm.config import SlurmSettings
    from fellows_fsm.scheduler.port import Scheduler
    from fellows_fsm.slurm.accounting import Grants

__all__ = ["world_problems"]

Reader = Callable[["Scheduler"], "Callable[[], Grants] | None"]


def world_problems(
    clusters: Sequence[SlurmSettings],
    lanes: Sequence[LaneSettings],
    port: Callable[[SlurmSettings], Scheduler],
    grants: Reader,
) -> tuple[list[str], list[str]]:
    """Every problem of the world behind a config, one line each, and the lines of ``config_warnings`` they
    replace (a lane's program not found here is a problem, not a warning, once the world is checked):
    ``clusters`` are its SLURM lanes (those the order leaves out, reached by --pin only, too), ``lanes`` every lane
    a dispatch may be handed to (the config's ``lanes``; those that walk rungs are the clusters, skipped here).

    ``port(lane)`` is each SLURM lane's port (bounded: slurm/world.py ``bounded``); ``grants(port)`` reads what
    that cluster grants (None: nothing to read). The clusters are asked side by side, so one that hangs costs its
    own timeout once.
    """

    def one(lane: SlurmSettings) -> list[str]:
        scheduler = port(lane)
        return cluster_problems(lane, scheduler, grants(scheduler))

    with ThreadPoolExecutor(max_workers=len(clusters), thread_name_prefix="config-check") as pool:
        problems = [line for found in pool.map(one, clusters) for line in found]
    replaced: list[str] = []
    for lane in lanes:
        if lane.walks_ladder:
            continue
        try:
            lane.check_reachable()
        except LaneError as exc:
            problems.append(f"[lanes.{lane.name}]: {exc}")
        missing = lane.warnings()
        problems.extend(missing)
        replaced.extend(missing)
    return problems, replaced
