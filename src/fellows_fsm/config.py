"""The configuration: frozen, validated values for the QoS ladder, its park caps and the poll.

Every bad value is refused when the config is built, with a ConfigError naming the key and the value.
This module reads the environment only for defaults, at build time, and never touches the cluster.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from fellows_fsm.errors import ConfigError

__all__ = [
    "DEFAULT_LADDER",
    "DEFAULT_PARK_CAP_SECONDS",
    "PARK_CAP_ENV",
    "FellowsConfig",
    "Ladder",
    "Rung",
    "default_park_cap",
]

PARK_CAP_ENV = "EPS_FELLOWS_QUEUE_WAIT_SECONDS"
DEFAULT_PARK_CAP_SECONDS = 600.0
DEFAULT_LADDER = ("high-eur", "normal-eur", "low-eur")
_QOS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _positive_seconds(key: str, value: object) -> float:
    """Return ``value`` as seconds, or raise a ConfigError naming ``key`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}={value!r} is not a number of seconds; give a positive number such as 600")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{key}={value!r} must be a positive, finite number of seconds, such as 600")
    return seconds


def default_park_cap() -> float:
    """The park cap from ``EPS_FELLOWS_QUEUE_WAIT_SECONDS`` (read now), else 600 seconds."""
    raw = os.environ.get(PARK_CAP_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_PARK_CAP_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(
            f"{PARK_CAP_ENV}={raw!r} is not a number of seconds; set it to a positive number such as 600"
        ) from None
    return _positive_seconds(PARK_CAP_ENV, value)


def _check_qos_name(key: str, name: object) -> str:
    if not isinstance(name, str) or not _QOS_NAME.match(name):
        raise ConfigError(
            f"{key}={name!r} is not a QoS name; use letters, digits, '-', '_' or '.', e.g. 'high-eur'"
        )
    return name


@attrs.frozen
class Rung:
    """One step of the ladder: a QoS and how long a job may stay pending on it."""

    index: int
    qos: str
    park_cap_seconds: float

    @property
    def state_name(self) -> str:
        """The identifier-safe state name, e.g. ``SUBMITTED_high_eur`` or ``RESUBMITTED_normal_eur``."""
        verb = "SUBMITTED" if self.index == 0 else "RESUBMITTED"
        return f"{verb}_{re.sub(r'[^A-Za-z0-9]', '_', self.qos)}"

    @property
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


def _ladder_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(
            f"qos_ladder={value!r} must be a list of QoS names, e.g. ['high-eur', 'normal-eur']"
        )
    return tuple(value)


@attrs.frozen(kw_only=True)
class FellowsConfig:
    """The ``[fellows]`` table: which QoS to try, in which order, and for how long each."""

    qos: str = attrs.field(default="high-eur")
    """The preferred QoS: every non-debug dispatch is submitted on it first."""
    qos_ladder: tuple[str, ...] = attrs.field(default=DEFAULT_LADDER, converter=_ladder_tuple)
    """The rungs in order; must start with ``qos``."""
    park_cap_seconds: float = attrs.field(factory=default_park_cap)
    """How long a job may stay pending on a rung; default from EPS_FELLOWS_QUEUE_WAIT_SECONDS, else 600."""
    later_park_cap_seconds: float | None = None
    """An optional shorter cap for rungs 2 and later."""
    poll_interval_seconds: float = 10.0
    """How often the router asks SLURM about every live job (one squeue per poll)."""
    debug_qos: str | None = None
    """A QoS for debug-intent dispatches (e.g. 'dev-eur'), tried before the ladder; off when None."""
    debug_park_cap_seconds: float | None = None
    """Park cap on the debug QoS; defaults to ``park_cap_seconds``."""
    debug_name_prefix: str = "D_"
    """The cluster's naming convention for debug jobs, applied to debug-intent dispatches."""

    def __attrs_post_init__(self) -> None:
        _check_qos_name("qos", self.qos)
        for i, name in enumerate(self.qos_ladder):
            _check_qos_name(f"qos_ladder[{i}]", name)
        _positive_seconds("park_cap_seconds", self.park_cap_seconds)
        _positive_seconds("poll_interval_seconds", self.poll_interval_seconds)
        if self.later_park_cap_seconds is not None:
            _positive_seconds("later_park_cap_seconds", self.later_park_cap_seconds)
        if self.debug_park_cap_seconds is not None:
            _positive_seconds("debug_park_cap_seconds", self.debug_park_cap_seconds)
        if not self.qos_ladder:
            raise ConfigError("qos_ladder=[] is empty; list at least the preferred QoS, e.g. ['high-eur']")
        if self.qos_ladder[0] != self.qos:
            raise ConfigError(
                f"qos_ladder={list(self.qos_ladder)!r} starts with {self.qos_ladder[0]!r}, "
                f"but every dispatch must start on qos={self.qos!r}; put {self.qos!r} first"
            )
        seen: set[str] = set()
        for name in self.qos_ladder:
            if name in seen:
                raise ConfigError(
                    f"qos_ladder={list(self.qos_ladder)!r} lists {name!r} twice; list each QoS once"
                )
            seen.add(name)
        if self.debug_qos is not None:
            _check_qos_name("debug_qos", self.debug_qos)
            if self.debug_qos in seen:
                raise ConfigError(
                    f"debug_qos={self.debug_qos!r} is also in qos_ladder; the debug QoS is tried before "
                    "the ladder, so remove it from qos_ladder"
                )
        if not isinstance(self.debug_name_prefix, str) or not re.fullmatch(
            r"[A-Za-z0-9_.-]*", self.debug_name_prefix
        ):
            raise ConfigError(
                f"debug_name_prefix={self.debug_name_prefix!r} must be letters, digits, '-', '_' or '.'"
            )

    def cap_for(self, position: int) -> float:
        """The park cap of the ladder rung at ``position`` (0 is the preferred QoS)."""
        if position > 0 and self.later_park_cap_seconds is not None:
            return self.later_park_cap_seconds
        return self.park_cap_seconds

    @property
    def ladder(self) -> Ladder:
        """The production ladder: ``qos_ladder`` with its caps."""
        return Ladder(tuple(Rung(i, qos, self.cap_for(i)) for i, qos in enumerate(self.qos_ladder)))

    def ladder_for(self, intent: str) -> Ladder:
        """The ladder for a dispatch of this intent: debug intent starts on ``debug_qos`` when configured."""
        if intent not in ("prod", "debug"):
            raise ConfigError(f"intent={intent!r} is not known; use 'prod' or 'debug'")
        if intent == "prod" or self.debug_qos is None:
            return self.ladder
        debug_cap = self.debug_park_cap_seconds or self.park_cap_seconds
        rungs = [Rung(0, self.debug_qos, debug_cap)]
        rungs += [Rung(i + 1, qos, self.cap_for(i)) for i, qos in enumerate(self.qos_ladder)]
        return Ladder(tuple(rungs))

    @property
    def worst_case_seconds(self) -> float:
        """The longest a production dispatch waits on the ladder before it reaches GCP (sum of caps)."""
        return self.ladder.worst_case_seconds

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], *, where: str = "[fellows]") -> FellowsConfig:
        """Build from a TOML table; unknown keys and bad values are refused, naming ``where`` and the key."""
        known = {a.name for a in attrs.fields(cls)}
        for key in table:
            if key not in known:
                raise ConfigError(f"{where}: unknown key {key!r}; known keys are {', '.join(sorted(known))}")
        try:
            return cls(**dict(table))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
