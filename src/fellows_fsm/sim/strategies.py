"""What a simulation plays: the strategies, the simulated cluster's and router's parameters (``SimParams``), and the
``[fellows]`` config that makes the one lifecycle machine play each router strategy.

Every strategy but the oracles is a configuration of the product, never a model of its own; the command line's
comma lists of strategies and park caps are read here too.
"""

from __future__ import annotations

import math

import attrs

from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.slurm.config import DEFAULT_LADDER, SlurmSettings
from fellows_fsm.sim.clusters import ClusterParams
from fellows_fsm.sim.jobs import FELLOWS_TIERS, Tier

__all__ = [
    "DEFAULT_STRATEGIES",
    "ORACLES",
    "PARK_EARLY",
    "STRATEGIES",
    "SimParams",
    "cluster_config",
    "parse_park_caps",
    "parse_strategies",
    "strategy_config",
]

STRATEGIES = (
    "static",
    "single-timeout",
    "ladder",
    "reason-aware",
    "predictive",
    "calibrated-last",
    "calibrated",
    "oracle",
    "oracle-prefer",
)
"""The strategies, in the order tables list them."""
PARK_EARLY = {
    "reason-aware": "own-cap",
    "predictive": "estimate",
    "calibrated-last": "calibrated-last",
    "calibrated": "calibrated",
}
"""The product's ``[fellows] park_early`` policy each strategy plays (every other router strategy: "off")."""
ORACLES = ("oracle", "oracle-prefer")
DEFAULT_STRATEGIES = ("static", "single-timeout", "ladder", "reason-aware", "predictive", "oracle")
"""What ``fellows-fsm simulate`` plays unless told (oracle-prefer costs a second look-ahead per job)."""


@attrs.frozen(kw_only=True)
class SimParams:
    """The simulated cluster and router: everything but the workload, the strategy and the park cap."""

    gpus: int = 64
    """GPUs in the cluster's pool (the local dev cluster has 64)."""
    tiers: tuple[Tier, ...] = FELLOWS_TIERS
    ladder: tuple[str, ...] = DEFAULT_LADDER
    """The QoS ladder of the ``ladder`` strategies; ``static`` and ``single-timeout`` use its first rung."""
    debug_qos: str | None = "dev-eur"
    """Where debug-intent jobs start (before the ladder), as in ``[fellows] debug_qos``."""
    poll_interval_seconds: float = 10.0
    max_rung_changes_per_tick: int = 20
    gcp_start_seconds: float = 0.0
    """Time from a GCP handoff to the job running there, added to its time-to-start."""
    max_wait_seconds: float = 14 * 86_400.0
    """How long past the last submission the simulation may run; jobs not started by then are unstarted."""
    park_early_last_rung: bool = False
    """``[fellows] park_early_last_rung`` for the reason-aware and predictive strategies (the product's default)."""
    clusters: tuple[ClusterParams, ...] = ()
    """More free clusters, walked in this order after fellows' ladder and before GCP (``[router] order``)."""

    def __attrs_post_init__(self) -> None:
        if self.gpus < 1:
            raise ConfigError(f"gpus={self.gpus!r}: the cluster needs at least one GPU")
        lanes = [c.name for c in self.clusters]
        if len(set(lanes)) != len(lanes):
            raise ConfigError(f"clusters {', '.join(lanes)}: a cluster is given twice; give each one once")
        names = {t.name for t in self.tiers}
        for qos in (*self.ladder, *([self.debug_qos] if self.debug_qos else [])):
            if qos not in names:
                raise ConfigError(f"QoS {qos!r} is not a tier of the simulated cluster ({', '.join(sorted(names))})")
        if self.gcp_start_seconds < 0:
            raise ConfigError(f"gcp_start_seconds={self.gcp_start_seconds!r} must be zero or more")


def strategy_config(strategy: str, park_cap_seconds: float, params: SimParams) -> SlurmSettings:
    """The ``[fellows]`` config that makes the lifecycle machine play ``strategy`` at this park cap.

    static: a ladder of just the first QoS, one cap, then GCP (today's behaviour). single-timeout: the
    same rung with the whole ladder's worst case as its one cap (Nextflow's maxSubmitAwait with that
    budget). ladder, reason-aware, predictive, the oracles: the full ladder with the cap on every rung;
    reason-aware, predictive, calibrated-last and calibrated are the ladder with ``park_early`` "own-cap",
    "estimate", "calibrated-last" (the last rung on the workload) and "calibrated" (every rung) (PARK_EARLY; both
    read the simulated cluster's workload through the real router).
    """
    ladder, cap = _played(strategy, park_cap_seconds, params.ladder)
    return SlurmSettings(
        qos=ladder[0],
        qos_ladder=ladder[1:],
        park_cap_seconds=cap,
        poll_interval_seconds=params.poll_interval_seconds,
        debug_qos=params.debug_qos,
        park_early=PARK_EARLY.get(strategy, "off"),
        park_early_last_rung=params.park_early_last_rung,
    )


def cluster_config(strategy: str, park_cap_seconds: float, cluster: ClusterParams, params: SimParams) -> SlurmSettings:
    """The ``[lanes.<name>] kind = "slurm"`` table of one more cluster under ``strategy``: its tiers are its ladder,
    played as fellows' is (static and single-timeout keep its first rung; single-timeout waits its whole ladder's
    budget there). Its ``host`` is its name, so two clusters' tiers of one name are two rungs (nothing is reached
    through it: the simulator gives the router each cluster's port)."""
    ladder, cap = _played(strategy, park_cap_seconds, cluster.ladder)
    return SlurmSettings(
        name=cluster.name,
        host=cluster.name,
        qos=ladder[0],
        qos_ladder=ladder[1:],
        park_cap_seconds=cap,
        park_early=PARK_EARLY.get(strategy, "off"),
        park_early_last_rung=params.park_early_last_rung,
    )


def _played(strategy: str, cap: float, ladder: tuple[str, ...]) -> tuple[tuple[str, ...], float]:
    """The rungs and the cap a strategy plays on one cluster's ladder."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy {strategy!r} is not known; use one of {', '.join(STRATEGIES)}")
    if strategy in ("static", "single-timeout"):
        return ladder[:1], cap * len(ladder) if strategy == "single-timeout" else cap
    return ladder, cap


def parse_park_caps(text: str) -> tuple[float, ...]:
    """Park caps from a comma list such as ``60,300,600`` (seconds); ConfigError naming a bad item."""
    caps = []
    for item in text.split(","):
        try:
            cap = float(item)
        except ValueError:
            raise ConfigError(
                f"--park-caps item {item.strip()!r} is not a number of seconds, e.g. 60,300,600"
            ) from None
        if not math.isfinite(cap) or cap <= 0:
            raise ConfigError(f"--park-caps item {item.strip()!r} must be a positive number of seconds")
        caps.append(cap)
    return tuple(caps)


def parse_strategies(text: str) -> tuple[str, ...]:
    """Strategies from a comma list such as ``static,ladder``; ConfigError naming an unknown one."""
    names = tuple(item.strip() for item in text.split(",") if item.strip())
    for name in names:
        if name not in STRATEGIES:
            raise ConfigError(f"strategy {name!r} is not known; use one of {', '.join(STRATEGIES)}")
    if not names:
        raise ConfigError(f"no strategy given; use one or more of {', '.join(STRATEGIES)}")
    return names
