"""The ladder: its rungs (a QoS on a SLURM lane and its park cap each), their state names and job tokens. Pure values.

A dispatch walks ONE ladder: the fellows lane's rungs first, then each next SLURM lane's of ``[router] order``
(``Ladder.joined``); a rung carries its lane, so every rung of every cluster is a row of the one table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from functools import cached_property

import attrs

from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError

__all__ = ["Ladder", "Rung", "dispatch_token", "qualified_job_id", "split_job_id", "state_label"]


@attrs.frozen
class Rung:
    """One step of the ladder: a QoS on one SLURM lane and how long a job may stay pending on it."""

    index: int
    qos: str
    park_cap_seconds: float
    lane: str = LADDER_LANE
    """The SLURM lane (cluster) the rung's job is queued on: ``fellows``, or a ``[lanes.<name>] kind = "slurm"``."""
    park_early: str | None = None
    """Another lane's own ``park_early`` on its rungs; None (fellows' rungs): the dispatch's."""

    @cached_property
    def state_name(self) -> str:
        """The identifier-safe state name, e.g. ``SUBMITTED_high_eur``, ``RESUBMITTED_normal_eur``, or on another
        lane ``RESUBMITTED_inst__inst_high`` (the lane, two underscores, the QoS)."""
        verb = "SUBMITTED" if self.index == 0 else "RESUBMITTED"
        on = "" if self.lane == LADDER_LANE else f"{re.sub(r'[^A-Za-z0-9]', '_', self.lane)}__"
        return f"{verb}_{on}{re.sub(r'[^A-Za-z0-9]', '_', self.qos)}"

    @cached_property
    def label(self) -> str:
        """The human label, e.g. ``SUBMITTED(high-eur)``, or on another lane ``RESUBMITTED(inst-high@inst)``."""
        verb = "SUBMITTED" if self.index == 0 else "RESUBMITTED"
        return f"{verb}({self.where})"

    @cached_property
    def where(self) -> str:
        """The QoS, and the lane when it is not fellows: ``normal-eur``, ``inst-high@inst``."""
        return self.qos if self.lane == LADDER_LANE else f"{self.qos}@{self.lane}"


@attrs.frozen
class Ladder:
    """The rungs a dispatch may walk, first to last; built only through SlurmSettings."""

    rungs: tuple[Rung, ...]

    def __attrs_post_init__(self) -> None:
        if not self.rungs:
            raise ConfigError("the QoS ladder is empty; give at least one QoS, e.g. ['high-eur']")
        names = [r.state_name for r in self.rungs]
        for i, rung in enumerate(self.rungs):
            if rung.index != i:
                raise ConfigError(f"rung {rung.qos!r} has index {rung.index}, expected {i}")
            if names.count(rung.state_name) > 1:
                raise ConfigError(f"QoS {rung.where!r} appears twice in the ladder; list each QoS once")

    @classmethod
    def joined(cls, parts: tuple[Ladder, ...]) -> Ladder:
        """One ladder walked across lanes: each part's rungs in order, numbered on (each keeps its lane)."""
        return cls.numbered(r for part in parts for r in part.rungs)

    @classmethod
    def numbered(cls, rungs: Iterable[Rung]) -> Ladder:
        """A ladder of ``rungs`` in order, numbered from 0 (each keeps its QoS, cap and lane)."""
        return cls(tuple(attrs.evolve(r, index=i) for i, r in enumerate(rungs)))

    @property
    def first(self) -> Rung:
        """The rung every dispatch is submitted on first."""
        return self.rungs[0]

    @property
    def last(self) -> Rung:
        """The rung after which a dispatch goes to the next lane."""
        return self.rungs[-1]

    @property
    def qos_names(self) -> tuple[str, ...]:
        """The QoS of each rung, in order."""
        return tuple(r.qos for r in self.rungs)

    def token_of(self, dispatch_id: str, index: int) -> str:
        """The dispatch token of the rung at ``index``, numbered within its own lane (``dispatch_token``)."""
        rung = self.rungs[index]
        if rung.lane == LADDER_LANE:
            return dispatch_token(dispatch_id, index)
        first = next(r.index for r in self.rungs if r.lane == rung.lane)
        return dispatch_token(dispatch_id, index - first, rung.lane)

    @property
    def lanes(self) -> tuple[str, ...]:
        """The SLURM lanes the ladder's rungs are on, in order, each once."""
        return tuple(dict.fromkeys(r.lane for r in self.rungs))

    @property
    def worst_case_seconds(self) -> float:
        """The longest a job can wait on this ladder before it is handed on: the sum of the rung caps."""
        return math.fsum(r.park_cap_seconds for r in self.rungs)


def dispatch_token(dispatch_id: str, rung_index: int, lane: str = LADDER_LANE) -> str:
    """The tag (sbatch --comment) of a dispatch's job on one rung: ``fsm-<dispatch id>-r<rung index>`` on fellows,
    ``fsm-<dispatch id>-r<place among the lane's rungs>@<lane>`` on another lane (so a lane's tokens never change
    when a rung or a lane is added before it: ``Ladder.token_of``)."""
    return f"fsm-{dispatch_id}-r{rung_index}" if lane == LADDER_LANE else f"fsm-{dispatch_id}-r{rung_index}@{lane}"


def qualified_job_id(lane: str, job_id: str) -> str:
    """A job id that names its cluster: as SLURM gave it on fellows, ``<id>@<lane>`` on another lane (the same
    number on two clusters is two jobs: the journal, the views and ``cancel`` keep them apart by this)."""
    return job_id if lane == LADDER_LANE else f"{job_id}@{lane}"


def split_job_id(job_id: str) -> tuple[str, str]:
    """The lane and SLURM's own id of a ``qualified_job_id``."""
    raw, at, lane = job_id.partition("@")
    return (lane, raw) if at else (LADDER_LANE, job_id)


def state_label(ladder: Ladder, state: str) -> str:
    """The human label of a state name, e.g. ``RESUBMITTED(normal-eur)`` for ``RESUBMITTED_normal_eur``."""
    for rung in ladder.rungs:
        if rung.state_name == state:
            return rung.label
    return state
