"""A user's first config, written from what the cluster grants them (``fellows-fsm init``): the QoS ladder, a
debug QoS, the partition and account, with a paid lane and a ``[budget]`` left commented for the user to fill in.

Pure: it judges ``Grants`` already read and returns TOML text; it never reads the cluster or writes a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import attrs

from fellows_fsm.errors import ConfigError
from fellows_fsm.slurm.accounting import Grants, QosInfo

__all__ = ["Starter", "is_debug_qos", "starter", "starter_toml"]

_DEBUG_WORDS = re.compile(r"(^|[-_.])(debug|dev|devel|test|interactive)([-_.]|$)", re.IGNORECASE)


def is_debug_qos(name: str) -> bool:
    """A QoS meant for short debug jobs, by its name (``dev-eur``, ``debug``, ``gpu_test``): never a ladder rung."""
    return _DEBUG_WORDS.search(name) is not None


@attrs.frozen
class Starter:
    """What ``init`` chose from the grants: the rungs best first, the debug QoS, partition, account."""

    ladder: tuple[str, ...]
    debug_qos: str | None = None
    partition: str | None = None
    account: str | None = None
    left_out: tuple[str, ...] = ()
    """Granted QoS not on the ladder (a debug one not chosen, a priority-0 default like ``normal``), for a comment."""
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()


def _priority_order(qos: Sequence[QosInfo]) -> list[QosInfo]:
    return sorted(qos, key=lambda q: (-q.priority, q.name))


def starter(grants: Grants, *, first: str | None = None, partition: str | None = None) -> Starter:
    """Choose the ladder from ``grants``: ``first`` (or the highest-priority granted QoS that is not a debug one),
    then every granted non-debug QoS of lower priority, best first; a priority-0 QoS (SLURM's ``normal``) only
    when nothing else is granted. ConfigError (exit 3) naming what is granted when nothing fits."""
    granted = [grants.qos[name] for name in sorted(grants.granted) if name in grants.qos]
    if not granted:
        raise ConfigError(
            f"user {grants.user!r} is granted no QoS on this cluster (sacctmgr show assoc where user={grants.user}); "
            "ask the cluster's admins for an association, or check --host"
        )
    debug = [q for q in _priority_order(granted) if is_debug_qos(q.name)]
    rungs = [q for q in _priority_order(granted) if not is_debug_qos(q.name)]
    if any(q.priority > 0 for q in rungs):
        rungs = [q for q in rungs if q.priority > 0]
    names = ", ".join(sorted(q.name for q in granted))
    if first is not None:
        chosen = next((q for q in granted if q.name == first), None)
        if chosen is None:
            raise ConfigError(f"--qos {first!r} is not granted to user {grants.user!r} here; granted: {names}")
        below = [q for q in rungs if q.name != first and q.priority <= chosen.priority]
        rungs = [chosen, *below]
    if not rungs:
        raise ConfigError(
            f"user {grants.user!r} is granted only debug QoS here ({names}); name the first rung with --qos"
        )
    ladder = tuple(q.name for q in rungs)
    debug_qos = next((q.name for q in debug if q.name not in ladder), None)
    left_out = tuple(q.name for q in _priority_order(granted) if q.name not in ladder and q.name != debug_qos)
    accounts = tuple(sorted({a.account for a in grants.associations if a.account}))
    parts_of_assoc = sorted({a.partition for a in grants.associations if a.partition})
    partitions = tuple(sorted(grants.partitions or ()))
    if partition is None and len(parts_of_assoc) == 1:
        partition = parts_of_assoc[0]
    elif partition is None and len(partitions) == 1:
        partition = partitions[0]
    elif partition is not None and grants.partitions is not None and partition not in grants.partitions:
        raise ConfigError(
            f"--partition {partition!r} does not exist on this cluster; its partitions: {', '.join(partitions)}"
        )
    return Starter(
        ladder=ladder,
        debug_qos=debug_qos,
        partition=partition,
        account=accounts[0] if len(accounts) == 1 else None,
        left_out=left_out,
        accounts=accounts,
        partitions=partitions,
    )


def _q(value: str) -> str:
    """A TOML basic string (JSON's escaping is TOML's for these characters)."""
    return json.dumps(value)


def starter_toml(
    chosen: Starter, grants: Grants, *, host: str | None, written_by: str, ssh_options: Sequence[str] = ()
) -> str:
    """The commented config text for ``chosen`` (it loads with ``Config.from_mapping``; init checks that)."""
    first, later = chosen.ladder[0], chosen.ladder[1:]

    def limits(name: str) -> str:
        info = grants.qos[name]
        said = [f"priority {info.priority}"]
        if info.max_gpus_per_user is not None:
            said.append(f"{info.max_gpus_per_user} GPUs per user")
        if info.max_wall_seconds is not None:
            hours = info.max_wall_seconds / 3600
            said.append(f"max wall {hours / 24:g} days" if hours >= 48 else f"max wall {hours:g} h")
        return ", ".join(said)

    lines = [
        f"# fellows-fsm configuration, written by `{written_by}` from what the cluster grants user {grants.user!r}.",
        "# Check it with `fellows-fsm config check`; `fellows-fsm config path` says which config is in use.",
        "# Every key is optional; the manual (docs/configuration.md in the source tree) explains each one.",
        "",
        "[fellows]",
    ]

    def line(setting: str, comment: str = "") -> str:
        return f"{setting:<40} # {comment}" if comment else setting

    if host is not None:
        lines.append(line(f"host = {_q(host)}", "every SLURM command runs there over one ssh connection"))
        if ssh_options:
            lines.append(f"ssh_options = [{', '.join(_q(o) for o in ssh_options)}]")
    lines.append(line(f"qos = {_q(first)}", f"every production dispatch starts here ({limits(first)})"))
    lines.append(line(f"qos_ladder = [{', '.join(_q(n) for n in later)}]", "the rungs tried after qos, best first"))
    lines += [f"#   {name}: {limits(name)}" for name in later]
    if chosen.left_out:
        lines.append(f"#   granted, not on the ladder: {', '.join(chosen.left_out)}")
    lines.append(line("park_cap_seconds = 600", "how long a job waits on a rung before the next one"))
    lines.append(line("poll_interval_seconds = 10", "one squeue per poll, for every live job"))
    if chosen.debug_qos is not None:
        debug = chosen.debug_qos
        lines.append(line(f"debug_qos = {_q(debug)}", f"`submit --intent debug` starts here ({limits(debug)})"))
    else:
        lines.append(line('# debug_qos = "dev"', "no debug QoS is granted to you here"))
    if chosen.partition is not None:
        lines.append(f"partition = {_q(chosen.partition)}")
    elif chosen.partitions:
        lines.append(
            line(f"# partition = {_q(chosen.partitions[0])}", f"the cluster's: {', '.join(chosen.partitions)}")
        )
    if chosen.account is None and chosen.accounts:
        lines.append(line(f"# account = {_q(chosen.accounts[0])}", f"yours: {', '.join(chosen.accounts)}"))
    lines += [
        "",
        "# A paid lane, tried only when no free rung started the job. GCP Batch through Google's client library",
        "# (pip install 'fellows-fsm[gcp]'; credentials: `gcloud auth application-default login`); uncomment it",
        "# and the [router] order below, and give your project, region and what a GPU-hour costs you:",
        "# [lanes.gcp]",
        '# kind = "gcp-batch"',
        '# project = "my-project"',
        '# region = "europe-west4"',
        '# accelerator = "nvidia-h100-80gb"',
        "# price_per_gpu_hour = 11.06",
        "# queue_timeout_seconds = 3600",
        "#",
        "# [router]",
        '# order = ["fellows", "gcp"]',
        "",
        "# What the paid lanes may spend (counted from the journal); a handoff over it waits on the last free rung.",
        "# [budget]",
        "# paid_gpu_hours_per_day = 64",
        "# paid_cost_per_month = 2000",
        "# max_paid_gpu_hours_per_job = 32",
        '# on_budget = "wait"                        # or "refuse"',
        "",
    ]
    return "\n".join(lines)
