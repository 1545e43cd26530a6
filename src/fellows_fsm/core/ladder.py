"""The ladder: its rungs (a QoS and its park cap each), their state names and job tokens. Pure values."""

from __future__ import annotations

import math
import re
from functools import cached_property

import attrs

from fellows_fsm.errors import ConfigError

__all__ = ["Ladder", "Rung", "dispatch_token", "state_label"]


@attrs.frozen
class Rung:
    """One step of the ladder: a QoS and how long a job may stay pending on it."""

    index: int
    qos: str
    park_cap_seconds: float

    @cached_property
    def state_name(self) -> str:
        """The identifier-safe state name, e.g. ``SUBMITTED_high_eur`` or ``RESUBMITTED_normal_eur``."""
        verb = "SUBMITTED" if self.index == 0 else "RESUBMITTED"
        return f"{verb}_{re.sub(r'[^A-Za-z0-9]', '_', self.qos)}"

    @cached_property
    def label(self) -> str:
        """The human label, e.g. ``SUBMITTED(high-eur)``."""
        verb = "SUBMITTED" if self.index == 0 else "RESUBMITTED"
        return f"{verb}({self.qos})"


@attrs.frozen
class Ladder:
    """The rungs a dispatch may walk, first to last; built only through FellowsConfig."""

    rungs: tuple[Rung, ...]

    def __attrs_post_init__(self) -> None:
        if not self.rungs:
            raise ConfigError("the QoS ladder is empty; give at least one QoS, e.g. ['high-eur']")
        names = [r.state_name for r in self.rungs]
        for i, rung in enumerate(self.rungs):
            if rung.index != i:
                raise ConfigError(f"rung {rung.qos!r} has index {rung.index}, expected {i}")
            if names.count(rung.state_name) > 1:
                raise ConfigError(f"QoS {rung.qos!r} appears twice in the ladder; list each QoS once")

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

    @property
    def worst_case_seconds(self) -> float:
        """The longest a job can wait on this ladder before it is handed on: the sum of the rung caps."""
        return math.fsum(r.park_cap_seconds for r in self.rungs)


def dispatch_token(dispatch_id: str, rung_index: int) -> str:
    """The tag (sbatch --comment) of a dispatch's job on one rung: ``fsm-<dispatch id>-r<rung index>``."""
    return f"fsm-{dispatch_id}-r{rung_index}"


def state_label(ladder: Ladder, state: str) -> str:
    """The human label of a state name, e.g. ``RESUBMITTED(normal-eur)`` for ``RESUBMITTED_normal_eur``."""
    for rung in ladder.rungs:
        if rung.state_name == state:
            return rung.label
    return state
