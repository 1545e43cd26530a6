"""More simulated clusters after fellows: each one's GPUs, QoS tiers and others' load (``ClusterParams``), the jobs
of that load, and the command line's ``--cluster NAME:GPUS[:LOAD]`` and ``--tier NAME/QOS:PRIORITY:CAP``.

Each one is a SLURM lane of the order (``[lanes.<name>] kind = "slurm"``), walked after fellows' ladder and before
GCP; every tier given is a rung, in the order given. Values and parsing only: nothing here runs a simulation.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence

import attrs

from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError
from fellows_fsm.sim.jobs import Tier, parse_tier
from fellows_fsm.sim.trace import TraceJob, synthetic_trace

__all__ = [
    "DEFAULT_TIER",
    "ClusterParams",
    "cluster_background",
    "parse_cluster",
    "parse_cluster_options",
]

DEFAULT_TIER = Tier("normal", 1)
"""The one tier of a cluster given no ``--tier NAME/...``: no per-user GPU cap, no MaxWall (one rung)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_RESERVED = (LADDER_LANE, "gcp")
_BACKGROUND_RANK = {"high-eur": 0, "normal-eur": 1, "low-eur": 2}
"""Others' jobs keep their place in the synthetic QoS mix: high-eur's on the first tier, normal-eur's on the second,
low-eur's on the third (each on the last tier when the cluster has fewer)."""


@attrs.frozen(kw_only=True)
class ClusterParams:
    """One more free cluster, walked after fellows: its GPUs, its tiers (each a rung, in order), others' load."""

    name: str
    """The lane's name in the order, e.g. ``inst``."""
    gpus: int
    tiers: tuple[Tier, ...] = (DEFAULT_TIER,)
    load: float = 0.0
    """Others' offered share of its GPU time (synthetic jobs of 1-8 GPUs, 10 min to 6 h); 0: only my jobs run there."""
    seed: int = 1
    """Seeds others' jobs there, with the name (two clusters of one seed get different jobs)."""

    def __attrs_post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name in _RESERVED:
            raise ConfigError(
                f"cluster name {self.name!r} must be letters, digits, '-', '_' or '.', and not "
                f"{' or '.join(repr(r) for r in _RESERVED)}, e.g. 'inst'"
            )
        if self.gpus < 1:
            raise ConfigError(f"cluster {self.name!r}: gpus={self.gpus!r}; a cluster needs at least one GPU")
        if not self.tiers:
            raise ConfigError(f"cluster {self.name!r} has no tier; give one with --tier {self.name}/QOS:PRIORITY:CAP")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ConfigError(f"cluster {self.name!r} lists a tier twice ({', '.join(names)}); give each QoS once")
        if not math.isfinite(self.load) or self.load < 0:
            raise ConfigError(f"cluster {self.name!r}: load={self.load!r}; give others' share of its GPUs, 0 or more")

    @property
    def ladder(self) -> tuple[str, ...]:
        """Its rungs: every tier, in the order given."""
        return tuple(t.name for t in self.tiers)


def cluster_background(cluster: ClusterParams, *, hours: float) -> tuple[TraceJob, ...]:
    """Others' jobs on ``cluster`` over ``hours``: the synthetic workload's background at its load, on its tiers."""
    if cluster.load == 0 or hours <= 0:
        return ()
    seed = zlib.crc32(f"{cluster.name}:{cluster.seed}".encode())
    jobs = synthetic_trace(seed=seed, hours=hours, gpus=cluster.gpus, background_load=cluster.load)
    last = len(cluster.tiers) - 1
    return tuple(
        attrs.evolve(j, qos=cluster.tiers[min(_BACKGROUND_RANK.get(j.qos or "", 1), last)].name)
        for j in jobs
        if not j.mine
    )


def parse_cluster(text: str, *, seed: int = 1) -> ClusterParams:
    """A cluster from ``NAME:GPUS[:LOAD]``, e.g. ``inst:32`` or ``inst:32:0.4`` (its tiers come separately)."""
    parts = text.split(":")
    example = "e.g. 'inst:32' (32 idle GPUs) or 'inst:32:0.4' (others use 40 % of them)"
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit():
        raise ConfigError(f"--cluster {text!r} is not NAME:GPUS[:LOAD], {example}")
    try:
        load = float(parts[2]) if len(parts) == 3 else 0.0
    except ValueError:
        raise ConfigError(f"--cluster {text!r}: load {parts[2]!r} is not a number, {example}") from None
    return ClusterParams(name=parts[0], gpus=int(parts[1]), load=load, seed=seed)


def parse_cluster_options(
    clusters: Sequence[str], tiers: Sequence[str], *, seed: int = 1
) -> tuple[tuple[Tier, ...], tuple[ClusterParams, ...]]:
    """The fellows tiers (every ``--tier`` without ``NAME/``) and each ``--cluster`` with its ``--tier NAME/...``."""
    parsed = [parse_cluster(text, seed=seed) for text in clusters]
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        raise ConfigError(f"--cluster names a cluster twice ({', '.join(names)}); give each one once")
    own: dict[str, list[Tier]] = {name: [] for name in names}
    fellows: list[Tier] = []
    for text in tiers:
        cluster, slash, tier = text.rpartition("/")
        if not slash:
            fellows.append(parse_tier(text))
        elif cluster not in own:
            raise ConfigError(
                f"--tier {text!r} names cluster {cluster!r}, which no --cluster gives; add --cluster {cluster}:GPUS"
            )
        else:
            own[cluster].append(parse_tier(tier))
    out = tuple(attrs.evolve(c, tiers=tuple(own[c.name])) if own[c.name] else c for c in parsed)
    return tuple(fellows), out
