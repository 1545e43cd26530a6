"""The configuration: frozen, validated values for the QoS ladder, its park caps, the lanes and the poll.

Every bad value is refused when the config is built, with a ConfigError naming the key and the value.
This module reads the environment only for defaults, at build time, and never touches the cluster. It holds the
whole ``Config`` (the ``[router]`` table, where the journal lives, loading the TOML file, the warnings of
``config check``); the ``[fellows]`` table is lanes/slurm/config.py, ``[budget]`` config/budget.py, and each
``[lanes.<name>]`` table is parsed by the kind it names (lanes/registry.py; the command kind's table is
lanes/command/config.py).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import attrs

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.discover import find_config
from fellows_fsm.config.journal import JournalConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.config.notify import MetricsConfig, NotifyConfig
from fellows_fsm.config.route import Route, check_intent
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.base import LaneSettings
from fellows_fsm.lanes.registry import fellows_table, lane_table, parse_fellows, parse_lane
from fellows_fsm.lanes.slurm.config import (
    SlurmSettings,
)
from fellows_fsm.tables import did_you_mean, positive_seconds, refuse_unknown_keys

__all__ = ["STATE_DIR_ENV", "Config", "RouterConfig", "config_mapping", "config_warnings", "load_config"]

RUNG_CHANGES_PER_SECOND = 20.0
"""The default bound on rung changes (one sbatch each) per second of poll interval."""

STATE_DIR_ENV = "FELLOWS_FSM_STATE_DIR"


@attrs.frozen(kw_only=True)
class RouterConfig:
    """The ``[router]`` table: lane order and how hard the poll loop may push the scheduler."""

    order: tuple[str, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    """The auto lane order: 'fellows' first, then other SLURM lanes (each ladder walked in turn), then the lane a
    dispatch is handed to. Default: 'fellows', every ``kind = "slurm"`` lane in file order, then 'gcp' when a
    [lanes.gcp] table exists."""
    max_rung_changes_per_tick: int | None = None
    """At most this many dispatches cancel, and as many resubmit, in one poll (no cancel/resubmit storms).

    Polls come once per poll interval, so this is a rate. Default (None): derived from the interval,
    ``RUNG_CHANGES_PER_SECOND`` per second of it (200 a poll at the default 10 s), enough for 10,000
    dispatches with 600 s caps; see ``Config.rung_changes_per_tick``."""
    controller_deadline: bool = False
    """Submit each rung with ``sbatch --deadline`` so SLURM itself drops a job still pending at the window's end
    plus its time limit. Off by default: SLURM's deadline is not moved by a hold, an outage or time no driver
    watched, so it can drop a job while no driver is alive to queue its next rung (docs/configuration.md)."""
    follow_interval_seconds: float = 30.0
    """How often a job that started is looked at until it ends (its end is recorded within this, or the poll
    interval if that is longer); it rides on a poll's one squeue, and its end on that poll's one sacct."""
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
        positive_seconds("[router] driver_idle_seconds", self.driver_idle_seconds, most=86_400.0)
        positive_seconds("[router] follow_interval_seconds", self.follow_interval_seconds, most=86_400.0)
        if self.change_rung not in ("cancel", "in-place"):
            raise ConfigError(f"[router] change_rung={self.change_rung!r} is not known; use 'cancel' or 'in-place'")
        if self.order is not None and (not self.order or self.order[0] != LADDER_LANE):
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
    """The whole configuration: the ladder, the lanes, the router, the budget, where the journal lives."""

    fellows: SlurmSettings = attrs.field(factory=SlurmSettings)
    lanes: tuple[LaneSettings, ...] = ()
    """Every ``[lanes.<name>]``, as its kind parsed it (``CommandSettings`` for the command kind)."""
    router: RouterConfig = attrs.field(factory=RouterConfig)
    budget: BudgetConfig = attrs.field(factory=BudgetConfig)
    """The ``[budget]`` table: what the paid lanes may spend (default: no limit)."""
    ledger: LedgerConfig | None = None
    """The ``[ledger]`` table: the shared ledger the budget is counted in (None: this journal alone)."""
    journal: JournalConfig = attrs.field(factory=JournalConfig)
    """The ``[journal]`` table: how long finished dispatches stay in the journal before the archive."""
    notify: NotifyConfig = attrs.field(factory=NotifyConfig)
    """The ``[notify]`` table: where a user is told of the steps (config/notify.py)."""
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)
    """The ``[metrics]`` table: a Prometheus textfile and /metrics address of the driver."""
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
        order = self.auto_order
        paid = [n for n in order[1:] if not self.lane(n).walks_ladder]
        for name in order[1:]:
            if paid and self.lane(name).walks_ladder and order.index(name) > order.index(paid[0]):
                raise ConfigError(
                    f"{self.source}: [router] order={list(order)!r} puts the paid lane {paid[0]!r} before the free "
                    f"SLURM lane {name!r}; list every SLURM lane before the first lane a job is handed to"
                )
        seen: dict[tuple[str, str | None, str], str] = {}
        for lane in self.slurm_lanes:
            for qos in lane.rung_names:
                key = (lane.where, lane.partition, qos)
                if key in seen:
                    raise ConfigError(
                        f"{self.source}: [lanes.{lane.name}] qos {qos!r} on {lane.where} (partition "
                        f"{lane.partition or 'default'}) is also a rung of lane {seen[key]!r}: the same rung twice; "
                        "give the lane another partition or QoS, or remove it from the order"
                    )
                seen[key] = lane.name
        if self.budget.paid_cost_per_month is not None:
            for name in order[1:]:
                settings = self.lane(name)
                if not settings.walks_ladder and settings.price_per_gpu_hour is None:
                    raise ConfigError(
                        f"{self.source}: [budget] paid_cost_per_month is set, but the paid lane {name!r} in the order "
                        f"has no price_per_gpu_hour, so its cost cannot be counted; give [lanes.{name}] "
                        "price_per_gpu_hour (what one GPU-hour costs there) or leave paid_cost_per_month out"
                    )
        if self.budget.scope == "team" and (self.ledger is None or self.ledger.team is None):
            raise ConfigError(
                f"{self.source}: [budget] scope='team' needs a [ledger] with a team (team = 'your-lab'); "
                "or use scope='user'"
            )

    @cached_property
    def auto_order(self) -> tuple[str, ...]:
        """The lanes a dispatch walks without a pin: [router] order, else fellows, every SLURM lane in file order,
        then gcp if configured."""
        if self.router.order is not None:
            return self.router.order
        first = self.fellows.name
        free = tuple(lane.name for lane in self.lanes if lane.walks_ladder)
        return (first, *free, "gcp") if any(lane.name == "gcp" for lane in self.lanes) else (first, *free)

    @cached_property
    def slurm_lanes(self) -> tuple[SlurmSettings, ...]:
        """The SLURM lanes a dispatch walks, in order: fellows, then each ``kind = "slurm"`` lane of the order."""
        later = [self.lane(n) for n in self.auto_order[1:] if self.lane(n).walks_ladder]
        return (self.fellows, *cast("list[SlurmSettings]", later))  # a lane that walks a ladder is a SLURM lane

    @cached_property
    def other_slurm_lanes(self) -> tuple[SlurmSettings, ...]:
        """Every SLURM lane but fellows: the order's, then any the order leaves out (reached only by ``--pin``)."""
        walked = self.slurm_lanes[1:]
        rest = [x for x in self.lanes if x.walks_ladder and x not in walked]
        return (*walked, *cast("list[SlurmSettings]", rest))

    @cached_property
    def after_ladder(self) -> str | None:
        """The lane a dispatch is handed to once every SLURM lane's ladder parked out (the first of the order that
        walks no ladder), or None."""
        return next((n for n in self.auto_order[1:] if not self.lane(n).walks_ladder), None)

    def ladder_for(self, intent: str) -> Ladder:
        """The one ladder a dispatch of ``intent`` walks: fellows' (a debug one starts on ``debug_qos``), then
        every next SLURM lane's, in order."""
        first = self.fellows.ladder_for(intent)
        later = self.slurm_lanes[1:]
        return Ladder.joined((first, *(lane.ladder for lane in later))) if later else first

    def lane(self, name: str) -> LaneSettings:
        """The ``[lanes.<name>]`` lane called ``name``."""
        for lane in self.lanes:
            if lane.name == name:
                return lane
        names = [self.fellows.name, *(lane.name for lane in self.lanes)]
        raise ConfigError(
            f"lane {name!r} is not configured{did_you_mean(name, names)}; known lanes: {', '.join(names)}"
        )

    def lane_named(self, name: str) -> LaneSettings | None:
        """Any lane called ``name`` (``[fellows]`` included), or None if the config has none by that name."""
        return next((lane for lane in (self.fellows, *self.lanes) if lane.name == name), None)

    def following(self, name: str) -> str | None:
        """The lane after ``name`` in the auto order (where a dispatch goes when it leaves ``name``), or None."""
        order = self.auto_order
        return order[order.index(name) + 1] if name in order[:-1] else None

    def route(self, pin: str | None = None, intent: str = "prod") -> Route:
        """Where a request of ``intent`` pinned to ``pin`` (None: it walks) goes: the one question every part of a
        submit asks (config/route.py). UsageError for an intent other than prod or debug, ConfigError for a pin
        that names no configured lane."""
        intent = check_intent(intent)
        if pin is None:
            walk = tuple(lane.name for lane in self.slurm_lanes)
            paid = self.after_ladder
            return Route(intent, None, self.fellows.name, self.ladder_for(intent), walk, paid, paid)
        pinned = self.lane_named(pin)
        if pinned is None:
            names = [self.fellows.name, *(lane.name for lane in self.lanes)]
            raise ConfigError(
                f"--pin {pin!r} is not a configured lane{did_you_mean(pin, names)}; known lanes: {', '.join(names)}"
            )
        if not pinned.walks_ladder:
            return Route(intent, pin, pin, None, (), pin, None)
        if pin == self.fellows.name:
            ladder = self.fellows.ladder_for(intent)
        else:  # that lane's own ladder, numbered from 0: its first rung is where the pinned job stays
            ladder = Ladder.joined((cast("SlurmSettings", pinned).ladder,))
        return Route(intent, pin, self.fellows.name, ladder, (pin,), None, None)

    @property
    def rung_changes_per_tick(self) -> int:
        """The per-poll bound on rung changes: ``[router] max_rung_changes_per_tick``, else derived from the poll
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
        known = {
            "fellows",
            "lanes",
            "router",
            "budget",
            "ledger",
            "journal",
            "notify",
            "metrics",
            "state_dir",
            "allow_network_state_dir",
        }
        for key in data:
            if key not in known:
                guess = did_you_mean(key, known)
                raise ConfigError(f"{source}: unknown table or key {key!r}{guess}; known: {', '.join(sorted(known))}")
        try:
            fellows = parse_fellows(_table(data, "fellows", source))
            lanes = [parse_lane(name, table) for name, table in _table(data, "lanes", source).items()]
            router_table = _table(data, "router", source)
            refuse_unknown_keys("[router]", router_table, (a.name for a in attrs.fields(RouterConfig)))
            router = RouterConfig(**dict(router_table))
            budget = BudgetConfig.from_table(_table(data, "budget", source))
            journal = JournalConfig.from_table(_table(data, "journal", source))
            extra: dict[str, Any] = {
                "notify": NotifyConfig.from_table(_table(data, "notify", source)),
                "metrics": MetricsConfig.from_table(_table(data, "metrics", source)),
            }
            if "ledger" in data:
                extra["ledger"] = LedgerConfig.from_table(_table(data, "ledger", source))
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
            return cls(
                fellows=fellows,
                lanes=tuple(lanes),
                router=router,
                budget=budget,
                journal=journal,
                source=source,
                **extra,
            )
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

    def plain_table(value: Mapping[str, Any]) -> dict[str, Any]:
        return {key: plain(item) for key, item in value.items() if item is not None}

    return {
        "fellows": plain_table(fellows_table(config.fellows)),
        "lanes": {lane.name: plain_table(lane_table(lane)) for lane in config.lanes},
        "router": plain_table({f.name: getattr(config.router, f.name) for f in attrs.fields(RouterConfig)}),
        "budget": plain_table(config.budget.table()),
        **({"ledger": plain_table(config.ledger.table())} if config.ledger is not None else {}),
        "journal": config.journal.table(),
        "notify": config.notify.table(),
        "metrics": config.metrics.table(),
        "state_dir": str(config.state_dir.absolute()),
        "allow_network_state_dir": config.allow_network_state_dir,
    }


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {key} must be a table ([{key}]), got {value!r}")
    return value


def load_config(path: Path | str | None = None) -> Config:
    """Load the TOML config: ``path``, else $FELLOWS_FSM_CONFIG, else ./fellows.toml, else the user's own
    (config/discover.py: ``find_config``), else the defaults."""
    found = find_config(path)
    candidate, where = found.path, found.where
    if candidate is None:
        return Config()
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where} does not exist; create it or pass --config") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} is a directory, not a TOML file; point it at a file such as fellows.toml") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "point it at a TOML file (`fellows-fsm init` writes one)"
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
        warnings.extend(lane.warnings())
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
