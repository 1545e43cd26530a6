"""The configuration: frozen, validated values for the QoS ladder, its park caps and the poll.

Every bad value is refused when the config is built, with a ConfigError naming the key and the value.
This module reads the environment only for defaults, at build time, and never touches the cluster.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import attrs

from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.policy import DEFAULT_PARK_EARLY, DEFAULT_PARK_EARLY_LAST_RUNG, PARK_EARLY_POLICIES
from fellows_fsm.core.vocab import FELLOWS
from fellows_fsm.errors import ConfigError
from fellows_fsm.history import HISTORY_SPAN_SECONDS
from fellows_fsm.slurm.transport import check_destination

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_LADDER",
    "DEFAULT_LATER_RUNGS",
    "DEFAULT_PARK_CAP_SECONDS",
    "DEFAULT_QOS",
    "LANE_ENVIRONMENT",
    "PARK_CAP_ENV",
    "STATE_DIR_ENV",
    "Config",
    "FellowsConfig",
    "Ladder",
    "LaneConfig",
    "RouterConfig",
    "Rung",
    "config_mapping",
    "config_warnings",
    "default_park_cap",
    "load_config",
]

PARK_CAP_ENV = "EPS_FELLOWS_QUEUE_WAIT_SECONDS"
DEFAULT_PARK_CAP_SECONDS = 600.0
DEFAULT_QOS = "high-eur"
DEFAULT_LATER_RUNGS = ("normal-eur", "low-eur")
RUNG_CHANGES_PER_SECOND = 20.0
"""The default budget of rung changes (one sbatch each) per second of poll interval."""
DEFAULT_LADDER = (DEFAULT_QOS, *DEFAULT_LATER_RUNGS)
MAX_CAP_SECONDS = 30 * 86_400.0
"""The longest park cap (or lane timeout) accepted: 30 days; beyond it deadlines stop being dates sbatch takes."""
MIN_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 3600.0
_QOS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _positive_seconds(key: str, value: object, *, most: float = MAX_CAP_SECONDS) -> float:
    """Return ``value`` as seconds, or raise a ConfigError naming ``key`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}={value!r} is not a number of seconds; give a positive number such as 600")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{key}={value!r} must be a positive, finite number of seconds, such as 600")
    if seconds > most:
        raise ConfigError(f"{key}={value!r} is over the maximum of {most:g} seconds; give at most {most:g}")
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
class FellowsConfig:
    """The ``[fellows]`` table: which QoS to try, in which order, and for how long each."""

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
    debug_qos: str | None = None
    """A QoS for debug-intent dispatches (e.g. 'dev-eur'), tried before the ladder; off when None."""
    debug_park_cap_seconds: float | None = None
    """Park cap on the debug QoS; defaults to ``park_cap_seconds``."""
    debug_name_prefix: str = "D_"
    """The cluster's naming convention for debug jobs, applied to debug-intent dispatches."""
    park_early: str = DEFAULT_PARK_EARLY
    """When a job leaves a rung before its window closes: 'off' (wait out every cap), 'own-cap' (at once while
    the user's own per-QoS cap holds it back), 'estimate' (once SLURM's start estimate lies past the window).
    The cap still bounds every rung. See policy.py and docs/configuration.md."""
    park_early_last_rung: bool = DEFAULT_PARK_EARLY_LAST_RUNG
    """Whether ``park_early`` also applies on the last rung, where leaving hands the job to the paid lane (default:
    no, the last rung waits out its window; see docs/configuration.md). ``calibrated`` decides the last rung on
    the cluster's history whatever this says."""
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
    calibrated_history_seconds: float = HISTORY_SPAN_SECONDS
    """How far back ``park_early = "calibrated"`` reads the cluster's finished jobs (default two days)."""

    def __attrs_post_init__(self) -> None:
        _check_qos_name("qos", self.qos)
        if self.host is not None:
            check_destination(self.host)
        _positive_seconds("ssh_connect_timeout_seconds", self.ssh_connect_timeout_seconds, most=MAX_POLL_SECONDS)
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
        _positive_seconds("park_cap_seconds", self.park_cap_seconds)
        _positive_seconds("poll_interval_seconds", self.poll_interval_seconds, most=MAX_POLL_SECONDS)
        if self.poll_interval_seconds < MIN_POLL_SECONDS:
            raise ConfigError(
                f"poll_interval_seconds={self.poll_interval_seconds!r} is under the minimum of "
                f"{MIN_POLL_SECONDS:g} seconds; give 10 (one squeue per poll)"
            )
        if self.later_park_cap_seconds is not None:
            _positive_seconds("later_park_cap_seconds", self.later_park_cap_seconds)
        if self.debug_park_cap_seconds is not None:
            _positive_seconds("debug_park_cap_seconds", self.debug_park_cap_seconds)
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
        _positive_seconds("calibrated_history_seconds", self.calibrated_history_seconds)
        if not isinstance(self.park_early_last_rung, bool):
            raise ConfigError(f"park_early_last_rung={self.park_early_last_rung!r} must be true or false")
        if not isinstance(self.debug_name_prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.-]*", self.debug_name_prefix):
            raise ConfigError(f"debug_name_prefix={self.debug_name_prefix!r} must be letters, digits, '-', '_' or '.'")

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
        return Ladder(tuple(Rung(i, qos, self.cap_for(i)) for i, qos in enumerate(self.rung_names)))

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


STATE_DIR_ENV = "FELLOWS_FSM_STATE_DIR"
CONFIG_ENV = "FELLOWS_FSM_CONFIG"
PLACEHOLDERS = frozenset({"dispatch_id", "gpus", "time_limit_seconds", "time_limit_minutes"})
"""The argv placeholders: only values fellows-fsm makes itself from a safe alphabet (hex digits, decimal digits),
which no program can read as code. Every value of a job reaches a lane command through the environment."""
LANE_ENVIRONMENT = {
    "dispatch_id": "FSM_DISPATCH_ID",
    "job_name": "FSM_JOB_NAME",
    "script": "FSM_SCRIPT",
    "workdir": "FSM_WORKDIR",
    "gpus": "FSM_GPUS",
    "time_limit_seconds": "FSM_TIME_LIMIT_SECONDS",
    "time_limit_minutes": "FSM_TIME_LIMIT_MINUTES",
}
"""The environment variable of every value a lane command gets (the job's user controls job_name, script, workdir)."""
USER_VALUES = frozenset({"job_name", "script", "workdir"})
"""Values a job's user controls: refused as argv placeholders (an argument may be code to the program that
gets it: ``sh -c``, ``perl -E``, ``find -exec``, ssh's remote command...), passed only in the environment."""
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


_SAMPLE_VALUES = dict.fromkeys(PLACEHOLDERS, "1")


def _check_template_item(key: str, item: str) -> None:
    """Refuse an argv item whose ``{...}`` fields are malformed or unknown (it must fill for every dispatch)."""
    for name in _PLACEHOLDER.findall(item.replace("{{", "").replace("}}", "")):
        if name in USER_VALUES:
            variable = LANE_ENVIRONMENT[name]
            raise ConfigError(
                f"{key} uses placeholder {{{name}}}, a value the job's user controls, which could run as code in "
                f"an argument; read it from the environment as ${variable} instead, e.g. "
                f"['sh', '-c', 'exec sky launch \"${variable}\"']"
            )
        if name not in PLACEHOLDERS:
            raise ConfigError(
                f"{key} uses placeholder {{{name}}}, which is not known; "
                f"use one of {', '.join('{' + p + '}' for p in sorted(PLACEHOLDERS))}"
            )
    try:
        item.format_map(_SAMPLE_VALUES)
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(
            f"{key} item {item!r} is not a valid template ({exc}); write placeholders as {{dispatch_id}} "
            "and a literal brace as {{ or }}"
        ) from None


def _argv(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            f"{key}={value!r} must be a non-empty list of arguments (argv, never a shell string), "
            "e.g. ['gcloud', 'batch', 'jobs', 'submit', 'fsm-{dispatch_id}']"
        )
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(f"{key} item {item!r} must be a string")
        _check_template_item(key, item)
    return tuple(value)


@attrs.frozen(kw_only=True)
class LaneConfig:
    """A command lane (``[lanes.<name>]``): GCP, or a manual-only lane such as RunPod."""

    name: str
    command: tuple[str, ...]
    """The argv template run once to hand a job over; placeholders like ``{dispatch_id}``."""
    probe: tuple[str, ...] | None = None
    """Optional argv template that exits 0 when the lane already has this dispatch's job."""
    manual_only: bool = False
    """A manual-only lane is never in the auto order; it runs only when a dispatch is pinned to it."""
    timeout_seconds: float = 600.0

    def __attrs_post_init__(self) -> None:
        where = f"[lanes.{self.name}]"
        _argv(f"{where} command", self.command)
        if self.probe is not None:
            _argv(f"{where} probe", self.probe)
        _positive_seconds(f"{where} timeout_seconds", self.timeout_seconds)
        if self.name == FELLOWS:
            raise ConfigError("[lanes.fellows] is reserved for the SLURM ladder; configure it under [fellows]")


@attrs.frozen(kw_only=True)
class RouterConfig:
    """The ``[router]`` table: lane order and how hard the poll loop may push the scheduler."""

    order: tuple[str, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    """The auto lane order; default: 'fellows', then 'gcp' when a [lanes.gcp] table exists."""
    max_rung_changes_per_tick: int | None = None
    """At most this many dispatches cancel, and as many resubmit, in one poll (no cancel/resubmit storms).

    Polls come once per poll interval, so this is a rate. Default (None): derived from the interval,
    ``RUNG_CHANGES_PER_SECOND`` per second of it (200 a poll at the default 10 s), enough for 10,000
    dispatches with 600 s caps; see ``Config.rung_changes_per_tick``."""
    controller_deadline: bool = False
    """Submit each rung with ``sbatch --deadline`` so SLURM itself drops a job still pending at the window's end
    plus its time limit. Off by default: SLURM's deadline is not moved by a hold, an outage or time no driver
    watched, so it can drop a job while no driver is alive to queue its next rung (docs/configuration.md)."""
    driver_idle_seconds: float = 30.0
    """How long the background driver stays up once nothing is live (then it exits; any command restarts it)."""
    change_rung: str = "cancel"
    """How a parked job changes rung: 'cancel' (cancel if pending, then sbatch on the next QoS) or
    'in-place' (``scontrol update qos=<next>`` on the pending job, same job id; slurmctld refuses it once the
    job runs, and a QoS it refuses falls back to cancel)."""

    def __attrs_post_init__(self) -> None:
        if self.max_rung_changes_per_tick is None:
            pass
        elif isinstance(self.max_rung_changes_per_tick, bool) or not isinstance(self.max_rung_changes_per_tick, int):
            raise ConfigError(
                f"[router] max_rung_changes_per_tick={self.max_rung_changes_per_tick!r} must be a whole number"
            )
        elif self.max_rung_changes_per_tick < 1:
            raise ConfigError(
                f"[router] max_rung_changes_per_tick={self.max_rung_changes_per_tick!r} must be at least 1"
            )
        _positive_seconds("[router] driver_idle_seconds", self.driver_idle_seconds, most=86_400.0)
        if self.change_rung not in ("cancel", "in-place"):
            raise ConfigError(f"[router] change_rung={self.change_rung!r} is not known; use 'cancel' or 'in-place'")
        if self.order is not None and (not self.order or self.order[0] != FELLOWS):
            raise ConfigError(
                f"[router] order={list(self.order)!r} must start with 'fellows': the free cluster goes first"
            )
        if self.order is not None:
            for name in self.order:
                if not isinstance(name, str):
                    raise ConfigError(f"[router] order={list(self.order)!r}: {name!r} is not a lane name")
                if self.order.count(name) > 1:
                    raise ConfigError(
                        f"[router] order={list(self.order)!r} lists {name!r} twice; a dispatch goes to each lane "
                        "once, so list it once"
                    )


def _default_state_dir() -> Path:
    raw = os.environ.get(STATE_DIR_ENV)
    if raw is not None and not raw.strip():
        raise ConfigError(
            f"{STATE_DIR_ENV}={raw!r} is set but empty; unset it (the default is $XDG_STATE_HOME/fellows-fsm) "
            "or give a directory"
        )
    if raw:
        return Path(raw)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fellows-fsm"


@attrs.frozen(kw_only=True)
class Config:
    """The whole configuration: the ladder, the lanes, the router, where the journal lives."""

    fellows: FellowsConfig = attrs.field(factory=FellowsConfig)
    lanes: tuple[LaneConfig, ...] = ()
    router: RouterConfig = attrs.field(factory=RouterConfig)
    state_dir: Path = attrs.field(factory=_default_state_dir, converter=Path)
    allow_network_state_dir: bool = False
    """Drive a journal whose state_dir is on a network filesystem (NFS, Lustre, GPFS, ...) anyway, with SQLite's
    rollback journal instead of WAL. Safe only if every fellows-fsm process using it runs on ONE host."""
    source: str = "defaults"
    """Where the config came from (a file path, or 'defaults'), for error messages."""

    def __attrs_post_init__(self) -> None:
        names = [lane.name for lane in self.lanes]
        for name in self.auto_order[1:]:
            if name not in names:
                raise ConfigError(
                    f"{self.source}: [router] order names lane {name!r}, which has no [lanes.{name}] table"
                )
            if self.lane(name).manual_only:
                raise ConfigError(
                    f"{self.source}: [router] order names {name!r}, which is manual_only; "
                    "remove it from the order (pin a dispatch to it instead)"
                )

    @property
    def auto_order(self) -> tuple[str, ...]:
        """The lanes a dispatch walks without a pin: [router] order, else fellows then gcp if configured."""
        if self.router.order is not None:
            return self.router.order
        return (FELLOWS, "gcp") if any(lane.name == "gcp" for lane in self.lanes) else (FELLOWS,)

    def lane(self, name: str) -> LaneConfig:
        """The command lane called ``name``."""
        for lane in self.lanes:
            if lane.name == name:
                return lane
        known = ", ".join([FELLOWS, *(lane.name for lane in self.lanes)])
        raise ConfigError(f"lane {name!r} is not configured; known lanes: {known}")

    @property
    def rung_changes_per_tick(self) -> int:
        """The per-poll budget of rung changes: ``[router] max_rung_changes_per_tick``, else derived from the poll
        interval (``RUNG_CHANGES_PER_SECOND`` per second of it, at least 1)."""
        if self.router.max_rung_changes_per_tick is not None:
            return self.router.max_rung_changes_per_tick
        return max(1, math.ceil(RUNG_CHANGES_PER_SECOND * self.fellows.poll_interval_seconds))

    @property
    def journal_path(self) -> Path:
        """The SQLite journal (keep it on a local disk, not NFS)."""
        return self.state_dir / "journal.sqlite3"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "defaults", base: Path | None = None) -> Config:
        """Build from parsed TOML; every error names ``source``, the table, the key and the value.

        A relative ``state_dir`` is taken relative to ``base`` (the config file's directory) when given.
        """
        known = {"fellows", "lanes", "router", "state_dir", "allow_network_state_dir"}
        for key in data:
            if key not in known:
                raise ConfigError(f"{source}: unknown table or key {key!r}; known: {', '.join(sorted(known))}")
        try:
            fellows = FellowsConfig.from_mapping(_table(data, "fellows", source))
            lanes_table = _table(data, "lanes", source)
            lanes = []
            for name, table in lanes_table.items():
                if not isinstance(table, Mapping):
                    raise ConfigError(f"[lanes.{name}] must be a table")
                allowed = {"command", "probe", "manual_only", "timeout_seconds"}
                for key in table:
                    if key not in allowed:
                        raise ConfigError(
                            f"[lanes.{name}]: unknown key {key!r}; known keys are {', '.join(sorted(allowed))}"
                        )
                if "command" not in table:
                    raise ConfigError(
                        f"[lanes.{name}] has no command; give the argv that hands a job over, e.g. "
                        "command = ['gcloud', 'batch', 'jobs', 'submit', 'fsm-{dispatch_id}']"
                    )
                lanes.append(LaneConfig(name=name, **dict(table)))
            router_table = _table(data, "router", source)
            allowed = {a.name for a in attrs.fields(RouterConfig)}
            for key in router_table:
                if key not in allowed:
                    raise ConfigError(f"[router]: unknown key {key!r}; known keys are {', '.join(sorted(allowed))}")
            router = RouterConfig(**dict(router_table))
            extra: dict[str, Any] = {}
            if "state_dir" in data:
                if not isinstance(data["state_dir"], str) or not data["state_dir"].strip():
                    raise ConfigError(f"state_dir={data['state_dir']!r} must be a directory path (a string)")
                state_dir = Path(data["state_dir"]).expanduser()
                # A relative state_dir is the config file's neighbour, wherever the command runs from.
                extra["state_dir"] = state_dir if base is None else base / state_dir
            if "allow_network_state_dir" in data:
                if not isinstance(data["allow_network_state_dir"], bool):
                    raise ConfigError(
                        f"allow_network_state_dir={data['allow_network_state_dir']!r} must be true or false"
                    )
                extra["allow_network_state_dir"] = data["allow_network_state_dir"]
            return cls(fellows=fellows, lanes=tuple(lanes), router=router, source=source, **extra)
        except ConfigError as exc:
            message = str(exc)
            raise ConfigError(message if message.startswith(source) else f"{source}: {message}") from None
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def config_mapping(config: Config) -> dict[str, Any]:
    """The config as the TOML mapping ``Config.from_mapping`` takes (every key, defaults resolved): what the
    background driver is started with, so it needs no config file, current directory or environment of its own."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, Path):
            return str(value)
        return value

    def table(value: Any, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        return {
            f.name: plain(getattr(value, f.name))
            for f in attrs.fields(type(value))
            if f.name not in skip and getattr(value, f.name) is not None
        }

    return {
        "fellows": table(config.fellows),
        "lanes": {lane.name: table(lane, skip=("name",)) for lane in config.lanes},
        "router": table(config.router),
        "state_dir": str(config.state_dir.absolute()),
        "allow_network_state_dir": config.allow_network_state_dir,
    }


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {key} must be a table ([{key}]), got {value!r}")
    return value


def load_config(path: Path | str | None = None) -> Config:
    """Load the TOML config: ``path``, else $FELLOWS_FSM_CONFIG, else ./fellows.toml, else the defaults."""
    candidate = Path(path) if path is not None else None
    where = f"config file {candidate}"
    if candidate is None and os.environ.get(CONFIG_ENV):
        candidate = Path(os.environ[CONFIG_ENV])
        where = f"{CONFIG_ENV}={str(candidate)!r}"
    if candidate is None:
        default = Path("fellows.toml")
        if not default.exists():
            return Config()
        candidate = default
        where = f"config file {candidate}"
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist; create it or pass --config") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a directory, not a TOML file; point it at a file such as fellows.toml") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "point it at a TOML file such as examples/fellows.toml"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read ({exc.strerror}); fix its permissions or pass --config") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{candidate}: not valid TOML: {exc}") from None
    return Config.from_mapping(data, source=str(candidate), base=candidate.absolute().parent)


def config_warnings(config: Config) -> tuple[str, ...]:
    """What is allowed but probably wrong: a lane program not on PATH here, a poll faster than once a second, a
    park cap shorter than two polls."""
    warnings: list[str] = []
    for lane in config.lanes:
        for what, argv in (("command", lane.command), ("probe", lane.probe)):
            if argv is None or "{" in argv[0]:
                continue
            if shutil.which(argv[0]) is None:
                warnings.append(
                    f"[lanes.{lane.name}] {what}: {argv[0]!r} is not found on PATH here; the handoff fails "
                    "unless it exists where fellows-fsm runs the dispatch"
                )
    if config.fellows.poll_interval_seconds < 1:
        warnings.append(
            f"[fellows] poll_interval_seconds={config.fellows.poll_interval_seconds:g} asks SLURM more than once "
            "a second; 10 is kind to a shared controller"
        )
    shortest = min(r.park_cap_seconds for r in config.fellows.ladder.rungs)
    if shortest < 2 * config.fellows.poll_interval_seconds:
        warnings.append(
            f"[fellows] a park cap of {shortest:g} s is under two polls of {config.fellows.poll_interval_seconds:g} s: "
            "a rung's window may close before the poll that would start its job, and the rung is passed over; "
            "raise the cap or lower poll_interval_seconds"
        )
    return tuple(warnings)
