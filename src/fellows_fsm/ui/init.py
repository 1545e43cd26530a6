"""``fellows-fsm init`` (a first config from what the cluster grants) and ``fellows-fsm config path`` (which config
and journal a command uses, and how it was found).

init reads the grants through the same seams as the preflight (ui/app.py: ``make_lane_scheduler``,
``read_grants``), locally or over ``--host``; it never writes over a file without ``--force``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

import attrs
import click

from fellows_fsm.config.discover import find_config, user_config_path
from fellows_fsm.config.file import Config
from fellows_fsm.config.starter import starter, starter_toml
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.slurm.accounting import read_partitions
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.ui import app
from fellows_fsm.ui.app import config_of, config_option, echo_json, main
from fellows_fsm.ui.tools import config_group

__all__ = ["config_header", "config_path", "init", "none_in", "where_config"]


@main.command(short_help="Write a first config from what the cluster grants you.")
@click.option("--host", metavar="HOST", help="Read the grants on this login node over ssh (and write host = HOST).")
@click.option(
    "--ssh-option",
    "ssh_options",
    multiple=True,
    metavar="OPT",
    help="With --host: one more ssh argument, e.g. --ssh-option=-F --ssh-option=~/.ssh/cluster (written too).",
)
@click.option("--qos", "first", metavar="QOS", help="The first rung (default: your best granted non-debug QoS).")
@click.option("--partition", metavar="NAME", help="The partition (default: the one your account or cluster has).")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Where to write it (default: see below)."
)
@click.option("--force", is_flag=True, help="Write over an existing file.")
@click.option("--print", "to_stdout", is_flag=True, help="Print the config instead of writing it.")
def init(  # noqa: PLR0917 - click passes every option as an argument
    host: str | None,
    ssh_options: tuple[str, ...],
    first: str | None,
    partition: str | None,
    output: Path | None,
    force: bool,
    to_stdout: bool,
) -> None:
    """Ask the cluster what it grants you (two sacctmgr calls and one scontrol, here or over ssh with --host) and
    write a commented config: the QoS ladder from your granted QoS, best first; a debug QoS if you have one; the
    partition; a paid lane and a [budget] left commented for you to fill in.

    It is written to $XDG_CONFIG_HOME/fellows-fsm/config.toml (~/.config/fellows-fsm/config.toml), the config
    every command finds when neither --config, $FELLOWS_FSM_CONFIG nor ./fellows.toml names another. An existing
    file is never written over without --force.
    """
    target = output if output is not None else user_config_path()
    if not to_stdout and target.exists() and not force:
        raise ConfigError(f"{target} exists; `fellows-fsm init --force` writes over it, or -o FILE writes elsewhere")
    base = Config()
    lane = SlurmSettings(host=host, ssh_options=ssh_options)
    port = app.make_lane_scheduler(base, lane)
    grants = app.read_grants(port)
    if isinstance(port, SlurmScheduler):
        grants = attrs.evolve(grants, partitions=read_partitions(port.runner))
    chosen = starter(grants, first=first, partition=partition)
    text = starter_toml(chosen, grants, host=host, ssh_options=ssh_options, written_by="fellows-fsm init")
    Config.from_mapping(tomllib.loads(text), source=str(target))  # what is written always loads
    if to_stdout:
        click.echo(text, nl=False)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
    ladder = " -> ".join(chosen.ladder)
    debug = f"; debug QoS {chosen.debug_qos}" if chosen.debug_qos else "; no debug QoS granted"
    click.echo(f"wrote {target}: ladder {ladder}{debug}; a paid lane and [budget] are left commented")
    found = find_config()
    if found.path is not None and found.path.absolute() != target.absolute():
        click.echo(f"fellows-fsm: note: commands here use {found.path} ({found.how}), found before {target}", err=True)
    click.echo("next: `fellows-fsm config check`, then `fellows-fsm submit SCRIPT`")


def where_config(config: Config) -> dict[str, str]:
    """The config a command uses and its journal, for headers and JSON: ``config`` is an absolute path or 'defaults'."""
    source = config.source if config.source == "defaults" else str(Path(config.source).absolute())
    return {"config": source, "journal": str(config.journal_path.absolute())}


def config_header(where: Mapping[str, str], *, sep: str = " · ") -> str:
    """What heads status and watch: the config in use and its journal (on two lines with ``sep="\\n"``, so each
    path folds within the width rather than being cut)."""
    return f"config {where['config']}{sep}journal {where['journal']}"


def none_in(config: Config, *, live: bool) -> str:
    """What status and watch say when there is nothing to show: the journal they read and the config naming it."""
    where = where_config(config)
    return f"no {'live ' if live else ''}dispatches in {where['journal']} ({config_header(where)})"


@config_group.command("path", short_help="Which config is in use, and its journal.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@config_option
@click.pass_context
def config_path(ctx: click.Context, as_json: bool) -> None:
    """Print the config file in use (found by --config, $FELLOWS_FSM_CONFIG, ./fellows.toml, then
    $XDG_CONFIG_HOME/fellows-fsm/config.toml), how it was found, and the journal it uses."""
    found = find_config(ctx.ensure_object(dict).get("config_path"))
    where = where_config(config_of(ctx))
    if as_json:
        echo_json({**where, "found_by": found.how})
        return
    if found.path is None:
        click.echo(f"config: none found, the defaults (`fellows-fsm init` writes {user_config_path()})")
    else:
        click.echo(f"config: {where['config']} ({found.how})")
    click.echo(f"journal: {where['journal']}")
