"""A SLURM lane's table (``[fellows]``, or ``[lanes.<name>] kind = "slurm"``): which QoS to try, in which order,
for how long each, where SLURM answers, and how a job is written there (partition, account, the GPU request).

Its values are checked when it is built (a ConfigError names the key and the value; the checks every table shares
are tables.py's). The park cap's default is read from the environment at
build time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

import attrs

from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.policy import (
    DEFAULT_PARK_EARLY,
    DEFAULT_PARK_EARLY_LAST_RUNG,
    PARK_EARLY_POLICIES,
    WORKLOAD_SPAN_SECONDS,
)
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError
from fellows_fsm.slurm.render import DEFAULT_GRES, LaneOptions
from fellows_fsm.slurm.transport import check_destination
from fellows_fsm.tables import did_you_mean, positive_seconds

__all__ = [
    "DEFAULT_LADDER",
    "DEFAULT_LATER_RUNGS",
    "DEFAULT_PARK_CAP_SECONDS",
    "DEFAULT_QOS",
    "MAX_POLL_SECONDS",
    "MIN_POLL_SECONDS",
    "PARK_CAP_ENV",
    "SlurmSettings",
    "default_park_cap",
]

PARK_CAP_ENV = "EPS_FELLOWS_QUEUE_WAIT_SECONDS"
DEFAULT_PARK_CAP_SECONDS = 600.0
DEFAULT_QOS = "high-eur"
DEFAULT_LATER_RUNGS = ("normal-eur", "low-eur")
DEFAULT_LADDER = (DEFAULT_QOS, *DEFAULT_LATER_RUNGS)
"""The longest park cap (or lane timeout) accepted: 30 days; beyond it deadlines stop being dates sbatch takes."""
MIN_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 3600.0
DEFAULT_SUBMITS_PER_SECOND = 10.0
"""sbatch calls a second to one cluster: 1,000 dispatches queued in under two minutes, while a controller that
answers each in about 5 ms spends a twentieth of its time on them (SLURM's own limiter, when on, allows 2/s)."""
MAX_SUBMITS_PER_SECOND = 1000.0
_QOS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a partition or an account
_GPU_TEMPLATE = re.compile(r"^[A-Za-z0-9_.:-]*\{gpus\}[A-Za-z0-9_.:-]*$")
FELLOWS_ONLY = ("poll_interval_seconds", "debug_qos", "debug_park_cap_seconds", "debug_name_prefix")
"""Keys of ``[fellows]`` alone: the router's cadence and the debug rung are the first lane's."""


_TEMPLATE_EXAMPLE = {"gres": "gpu:a100:{gpus}", "gpus_per_node": "h200:{gpus}"}
_BRACED = re.compile(r"\{[^{}]*\}")


def _template_fault(value: object) -> str:
    """What is wrong with a GPU template, in words (its example follows)."""
    if not isinstance(value, str):
        return "is not a string; give the GPU request with the placeholder {gpus} where the count goes"
    unknown = [field for field in _BRACED.findall(value) if field != "{gpus}"]
    if unknown:
        return f"has the unknown placeholder {unknown[0]}; the only one is {{gpus}} (the job's GPU count)"
    count = value.count("{gpus}")
    if count == 0:
        return "has no placeholder {gpus}; put it where the GPU count goes"
    if count > 1:
        return f"has the placeholder {{gpus}} {count} times; the GPU count is written once"
    return "may hold only letters, digits, ':', '_', '.' and '-' around {gpus}"


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
    return positive_seconds(PARK_CAP_ENV, value)


def _check_qos_name(key: str, name: object) -> str:
    if not isinstance(name, str) or not _QOS_NAME.match(name):
        raise ConfigError(f"{key}={name!r} is not a QoS name; use letters, digits, '-', '_' or '.', e.g. 'high-eur'")
    return name


def _ssh_options(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"ssh_options={value!r} must be a list of ssh arguments (argv, never a shell string), "
            "e.g. ['-F', '/home/me/.ssh/config'] or ['-J', 'bastion']"
        )
    return tuple(value)


def _ladder_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"qos_ladder={value!r} must be a list of QoS names, e.g. ['high-eur', 'normal-eur']")
    return tuple(value)


@attrs.frozen(kw_only=True)
class SlurmSettings:
    """The ``[fellows]`` table: which QoS to try, in which order, and for how long each. The first SLURM lane
    (lanes/slurm/lane.py): its table keeps its name, its kind is ``slurm``."""

    name: str = LADDER_LANE
    """The lane's name: ``fellows`` for the ``[fellows]`` table, else its ``[lanes.<name>]``."""
    kind: ClassVar[str] = "slurm"
    manual_only: ClassVar[bool] = False
    walks_ladder: ClassVar[bool] = True
    """A dispatch walks this lane's rungs (``lanes/base.py``: ``LaneSettings``)."""
    follows: ClassVar[bool] = True
    """Its jobs are observed to their end (squeue, sacct)."""
    price_per_gpu_hour: ClassVar[float | None] = None
    """A SLURM lane is free."""
    queue_timeout_seconds: ClassVar[float | None] = None
    """Its rungs' park caps bound the queueing, not a timeout."""

    qos: str = attrs.field(default=DEFAULT_QOS)
    """The preferred QoS: every non-debug dispatch is submitted on it first."""
    qos_ladder: tuple[str, ...] = attrs.field(default=DEFAULT_LATER_RUNGS, converter=_ladder_tuple)
    """The rungs tried after ``qos``, in order (``qos`` itself is not repeated here); may be empty."""
    park_cap_seconds: float = attrs.field(factory=default_park_cap)
    """How long a job may stay pending on a rung; default from EPS_FELLOWS_QUEUE_WAIT_SECONDS, else 600."""
    later_park_cap_seconds: float | None = None
    """An optional shorter cap for rungs 2 and later."""
    poll_interval_seconds: float = 10.0
    """How often the router asks SLURM about every live job (one squeue per poll)."""
    max_submits_per_second: float = DEFAULT_SUBMITS_PER_SECOND
    """The most sbatch calls a second the driver makes to this cluster (bursts of as many): slurm/pace.py."""
    debug_qos: str | None = None
    """A QoS for debug-intent dispatches (e.g. 'dev-eur'), tried before the ladder; off when None."""
    debug_park_cap_seconds: float | None = None
    """Park cap on the debug QoS; defaults to ``park_cap_seconds``."""
    debug_name_prefix: str = "D_"
    """The cluster's naming convention for debug jobs, applied to debug-intent dispatches."""
    park_early: str = DEFAULT_PARK_EARLY
    """When a job leaves a rung before its window closes: 'off' (wait out every cap), 'own-cap' (at once while
    the user's own per-QoS cap holds it back), 'estimate' (once SLURM's start estimate lies past the window),
    'calibrated' (own-cap; the last rung left when the cluster's workload gives a start within its window little
    chance, an earlier one when it gives a start on it before the ladder's end next to none), 'calibrated-last'
    (the last rung only). The cap still bounds every rung. See policy.py
    and docs/configuration.md."""
    park_early_last_rung: bool = DEFAULT_PARK_EARLY_LAST_RUNG
    """Whether ``park_early`` also applies on the last rung, where leaving hands the job to the paid lane (default:
    no, the last rung waits out its window; see docs/configuration.md). ``calibrated`` and ``calibrated-last``
    decide the last rung on the cluster's workload whatever this says."""
    host: str | None = None
    """The cluster's login host as an ssh destination (an ssh-config Host, 'user@host' or 'ssh://user@host:port'):
    every SLURM command runs there over one shared ssh connection. None: the SLURM commands on PATH here."""
    ssh_options: tuple[str, ...] = attrs.field(default=(), converter=_ssh_options)
    """Extra ssh arguments, before the destination (e.g. ['-F', '/path/ssh_config'], ['-J', 'bastion'])."""
    ssh_connect_timeout_seconds: float = 10.0
    """How long ssh may take to connect before the cluster counts as unreachable for that command."""
    remote_workdir: str | None = None
    """With ``host``: the job's working directory on the cluster when its script has no ``#SBATCH --chdir``
    (default: the login directory, normally the home directory, where sbatch starts over ssh)."""
    calibrated_history_seconds: float = WORKLOAD_SPAN_SECONDS
    """How far back ``park_early = "calibrated"`` reads the cluster's finished jobs (default two days)."""
    slurm_conf: str | None = None
    """Without ``host``: the cluster's slurm.conf, for a second cluster reached from here (SLURM_CONF of every
    command to it). None: the environment's SLURM_CONF."""
    partition: str | None = None
    """The partition every job of this lane is queued in (``--partition``, over a script's own line). None: the
    cluster's default, or what the job itself says."""
    account: str | None = None
    """The account every job of this lane is charged to (``--account``). None: the user's default there."""
    gres: str | None = None
    """How a GPU request is written on this cluster: a ``--gres`` template with ``{gpus}``, e.g. 'gpu:a100:{gpus}'
    (default 'gpu:{gpus}')."""
    gpus_per_node: str | None = None
    """Instead of ``gres``: a ``--gpus-per-node`` template with ``{gpus}``, e.g. '{gpus}' or 'h200:{gpus}'."""

    def check_reachable(self) -> None:
        """Nothing to check before a submit: the ladder's own check reads the cluster's grants."""

    def shown(self) -> tuple[str, str, float | None]:
        """The config view shows a SLURM lane as its ladder."""
        return ("(a SLURM ladder)", "", None)

    def warnings(self) -> tuple[str, ...]:
        """A SLURM lane runs no program of its own here."""
        return ()

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not _QOS_NAME.match(self.name):
            raise ConfigError(f"lane name {self.name!r} must be letters, digits, '-', '_' or '.'")
        _check_qos_name("qos", self.qos)
        self._check_cluster_keys()
        if self.host is not None:
            check_destination(self.host)
        positive_seconds("ssh_connect_timeout_seconds", self.ssh_connect_timeout_seconds, most=MAX_POLL_SECONDS)
        if self.ssh_options and self.host is None:
            raise ConfigError(f"ssh_options={list(self.ssh_options)!r} is set without host; set host too, or remove it")
        if self.remote_workdir is not None:
            if self.host is None:
                raise ConfigError(f"remote_workdir={self.remote_workdir!r} is set without host; set host, or remove it")
            # An absolute path: sbatch does not expand '~', and a relative one would depend on the login directory.
            if not isinstance(self.remote_workdir, str) or not self.remote_workdir.startswith("/"):
                raise ConfigError(
                    f"remote_workdir={self.remote_workdir!r} must be an absolute path on the cluster, e.g. "
                    "'/scratch/me/jobs'"
                )
        for i, name in enumerate(self.qos_ladder):
            _check_qos_name(f"qos_ladder[{i}]", name)
        positive_seconds("park_cap_seconds", self.park_cap_seconds)
        rate = self.max_submits_per_second
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= MAX_SUBMITS_PER_SECOND:
            raise ConfigError(
                f"max_submits_per_second={rate!r} must be a number above 0 and at most {MAX_SUBMITS_PER_SECOND:g}; "
                f"give {DEFAULT_SUBMITS_PER_SECOND:g} (the default)"
            )
        positive_seconds("poll_interval_seconds", self.poll_interval_seconds, most=MAX_POLL_SECONDS)
        if self.poll_interval_seconds < MIN_POLL_SECONDS:
            raise ConfigError(
                f"poll_interval_seconds={self.poll_interval_seconds!r} is under the minimum of "
                f"{MIN_POLL_SECONDS:g} seconds; give 10 (one squeue per poll)"
            )
        if self.later_park_cap_seconds is not None:
            positive_seconds("later_park_cap_seconds", self.later_park_cap_seconds)
        if self.debug_park_cap_seconds is not None:
            positive_seconds("debug_park_cap_seconds", self.debug_park_cap_seconds)
        if self.qos in self.qos_ladder:
            raise ConfigError(
                f"qos_ladder={list(self.qos_ladder)!r} repeats qos={self.qos!r}; qos_ladder lists only the rungs "
                f"after qos, so remove {self.qos!r} from it"
            )
        seen: set[str] = {self.qos}
        for name in self.qos_ladder:
            if name in seen:
                raise ConfigError(f"qos_ladder={list(self.qos_ladder)!r} lists {name!r} twice; list each QoS once")
            seen.add(name)
        if self.debug_qos is not None:
            _check_qos_name("debug_qos", self.debug_qos)
            if self.debug_qos in seen:
                raise ConfigError(
                    f"debug_qos={self.debug_qos!r} is also on the ladder (qos or qos_ladder); the debug QoS is "
                    "tried before the ladder, so give a QoS of its own, e.g. 'dev-eur'"
                )
        if self.park_early not in PARK_EARLY_POLICIES:
            raise ConfigError(
                f"park_early={self.park_early!r} is not known; use one of "
                f"{', '.join(repr(p) for p in PARK_EARLY_POLICIES)}"
            )
        positive_seconds("calibrated_history_seconds", self.calibrated_history_seconds)
        if not isinstance(self.park_early_last_rung, bool):
            raise ConfigError(f"park_early_last_rung={self.park_early_last_rung!r} must be true or false")
        if not isinstance(self.debug_name_prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.-]*", self.debug_name_prefix):
            raise ConfigError(f"debug_name_prefix={self.debug_name_prefix!r} must be letters, digits, '-', '_' or '.'")

    def _check_cluster_keys(self) -> None:
        """How the cluster is reached and how a job is written there: partition, account, the GPU template."""
        for key in ("partition", "account"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not _SLURM_NAME.match(value)):
                raise ConfigError(f"{key}={value!r} is not a SLURM {key} name; use letters, digits, '-', '_' or '.'")
        for key in ("gres", "gpus_per_node"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not _GPU_TEMPLATE.match(value)):
                raise ConfigError(f"{key}={value!r} {_template_fault(value)}, e.g. {key} = {_TEMPLATE_EXAMPLE[key]!r}")
        if self.gres is not None and self.gpus_per_node is not None:
            raise ConfigError(
                f"gres={self.gres!r} and gpus_per_node={self.gpus_per_node!r} are both set; a GPU request is "
                "written one way, so keep one"
            )
        if self.slurm_conf is not None:
            if self.host is not None:
                raise ConfigError(
                    f"slurm_conf={self.slurm_conf!r} is set with host={self.host!r}; over ssh the login host's own "
                    "config is used, so remove one"
                )
            if not isinstance(self.slurm_conf, str) or not self.slurm_conf.startswith("/"):
                raise ConfigError(f"slurm_conf={self.slurm_conf!r} must be an absolute path to a slurm.conf")

    @property
    def render_options(self) -> LaneOptions:
        """What this lane sets on every sbatch besides the rung's QoS (slurm/render.py)."""
        return LaneOptions(self.partition, self.account, self.gres or DEFAULT_GRES, self.gpus_per_node, self.name)

    @property
    def where(self) -> str:
        """Where the cluster answers, for messages and for telling two lanes' rungs apart: its host, or its
        slurm.conf, or 'here'."""
        return self.host or self.slurm_conf or "here"

    def cap_for(self, position: int) -> float:
        """The park cap of the ladder rung at ``position`` (0 is the preferred QoS)."""
        if position > 0 and self.later_park_cap_seconds is not None:
            return self.later_park_cap_seconds
        return self.park_cap_seconds

    @property
    def rung_names(self) -> tuple[str, ...]:
        """The production ladder's QoS, in order: ``qos``, then ``qos_ladder``."""
        return (self.qos, *self.qos_ladder)

    @cached_property
    def ladder(self) -> Ladder:
        """The production ladder: ``qos`` then ``qos_ladder``, with their caps (built once, shared by dispatches)."""
        own = None if self.name == LADDER_LANE else self.park_early  # (fellows' is the dispatch's: settings)
        return Ladder(tuple(Rung(i, qos, self.cap_for(i), self.name, own) for i, qos in enumerate(self.rung_names)))

    def ladder_for(self, intent: str) -> Ladder:
        """The ladder for a dispatch of this intent: debug intent starts on ``debug_qos`` when configured."""
        if intent not in ("prod", "debug"):
            raise ConfigError(f"intent={intent!r} is not known; use 'prod' or 'debug'")
        if intent == "prod" or self.debug_qos is None:
            return self.ladder
        return self.debug_ladder

    @cached_property
    def debug_ladder(self) -> Ladder:
        """The ladder of a debug dispatch when ``debug_qos`` is configured: it first, then the production rungs."""
        assert self.debug_qos is not None
        debug_cap = self.debug_park_cap_seconds or self.park_cap_seconds
        rungs = [Rung(0, self.debug_qos, debug_cap)]
        rungs += [Rung(i + 1, qos, self.cap_for(i)) for i, qos in enumerate(self.rung_names)]
        return Ladder(tuple(rungs))

    @property
    def worst_case_seconds(self) -> float:
        """The longest a production dispatch waits on the ladder before it reaches GCP (sum of caps)."""
        return self.ladder.worst_case_seconds

    @classmethod
    def from_mapping(
        cls, table: Mapping[str, Any], *, where: str = "[fellows]", name: str = LADDER_LANE
    ) -> SlurmSettings:
        """Build from a TOML table; unknown keys and bad values are refused, naming ``where`` and the key.

        A lane after fellows (``name``) must say its ``qos`` (its ladder is its own: ``qos_ladder`` defaults to
        none), how it is reached (``host``, or ``slurm_conf``), and takes no key of ``FELLOWS_ONLY``."""
        known = {a.name for a in attrs.fields(cls)} - {"name"}
        if name != LADDER_LANE:
            known -= set(FELLOWS_ONLY)
        for key in table:
            if key not in known:
                why = (
                    " (it is [fellows]' alone: one cadence and one debug rung per router)"
                    if key in FELLOWS_ONLY
                    else did_you_mean(key, known)
                )
                raise ConfigError(f"{where}: unknown key {key!r}{why}; known keys are {', '.join(sorted(known))}")
        values = dict(table)
        if name != LADDER_LANE:
            if "qos" not in values:
                raise ConfigError(
                    f"{where}: qos is missing; give the QoS this cluster's jobs are submitted under first "
                    "(`sacctmgr show assoc user=$USER` lists yours there)"
                )
            if "host" not in values and "slurm_conf" not in values:
                raise ConfigError(
                    f"{where}: no way to reach this cluster; give host (its login node, over ssh) or slurm_conf "
                    "(its slurm.conf, for a cluster reachable from here)"
                )
            values.setdefault("qos_ladder", [])
        try:
            return cls(name=name, **values)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
