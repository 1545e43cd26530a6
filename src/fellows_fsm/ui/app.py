"""The command group and what every command shares: the seams to the cluster, logging, the config option, the
journal and the API opened for a command, the console. Only ui/ prints.

The commands reach the cluster only through functions here, the seam tests replace with
``monkeypatch.setattr(app, ...)``: ``make_scheduler(config)`` (the port), ``make_lane_scheduler(config, lane)``
(another SLURM lane's, for its grants) and ``read_grants(scheduler)`` (sacctmgr).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from fellows_fsm.api import Fellows
from fellows_fsm.config.file import Config, load_config
from fellows_fsm.driver.process import ensure_driver
from fellows_fsm.errors import FellowsError, SchedulerError
from fellows_fsm.journal.lock import DriverOwner
from fellows_fsm.journal.queries import find
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import FellowsConfig
from fellows_fsm.lanes.slurm.lane import slurm_port, slurm_scheduler
from fellows_fsm.scheduler.port import Scheduler
from fellows_fsm.slurm.accounting import Grants, discover
from fellows_fsm.slurm.port import SlurmScheduler

__all__ = [
    "INTERRUPTED",
    "REFRESH_SECONDS",
    "STARTED",
    "config_of",
    "config_option",
    "echo_json",
    "find_row",
    "main",
    "make_console",
    "make_lane_scheduler",
    "make_scheduler",
    "next_lane_of",
    "open_fellows",
    "open_journal",
    "read_grants",
    "say_started",
    "start_driver",
]

log = logging.getLogger("fellows_fsm.cli")

INTERRUPTED = 130
"""Exit status after Ctrl-C: the dispatch goes on, detached."""
STARTED = "fellows-fsm: started the background driver"
"""How the one line begins that a command prints when it started the journal's background driver."""
REFRESH_SECONDS = 0.25
"""How often the live view redraws its countdowns between polls."""


# --------------------------------------------------------------------------- the seam to the cluster
def make_scheduler(config: Config) -> Scheduler:
    """The port every command uses: the real SLURM, here or on ``[fellows] host`` over ssh (tests replace this
    with a FakeScheduler)."""
    return slurm_scheduler(config)


def make_lane_scheduler(config: Config, lane: FellowsConfig) -> Scheduler:
    """The port of one more SLURM lane (a ``[lanes.<name>] kind = "slurm"``): here with its slurm_conf, or on its
    host over ssh (tests replace this with a FakeScheduler)."""
    return slurm_port(lane, config.state_dir)


def start_driver(config: Config, journal: Journal | None = None) -> DriverOwner | None:
    """Start the journal's background driver if it has work and none runs (tests run one in a thread instead)."""
    return ensure_driver(config, journal)


def say_started(owner: DriverOwner | None, config: Config) -> None:
    """The one line a command prints when it started the background driver."""
    if owner is not None:
        where = f"; log {owner.log}" if owner.log else ""
        click.echo(
            f"{STARTED} for {config.journal_path} ({owner.describe()}{where}); it walks every dispatch whatever "
            "becomes of this terminal (`fellows-fsm driver stop`)",
            err=True,
        )


def read_grants(scheduler: Scheduler) -> Grants:
    """What the cluster grants this user (two sacctmgr calls through the port's runner)."""
    if not isinstance(scheduler, SlurmScheduler):
        raise SchedulerError(f"reading grants needs the real SLURM port, not {type(scheduler).__name__}")
    return discover(scheduler.runner, scheduler.user)


# --------------------------------------------------------------------------- errors, logging, config
# click >= 8.2 asks for help with a UsageError of its own when a group gets no command: that one stays help.
_HELP_ERRORS: tuple[type[Exception], ...] = tuple(
    kind for kind in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if kind is not None
)


def _one_line(exc: click.ClickException) -> NoReturn:
    """Say click's own refusal (a bad option or argument) in one line, with where to read more, and exit with its
    code: never click's usage block, which would hide the line that names the value."""
    ctx = getattr(exc, "ctx", None)
    where = f"; see `{ctx.command_path} --help`" if isinstance(ctx, click.Context) else ""
    said = " ".join(exc.format_message().split())
    click.echo(f"fellows-fsm: error: {said}{where}", err=True)
    raise click.exceptions.Exit(exc.exit_code)


class _Group(click.Group):
    """Turns our errors and click's usage errors into one clear line and the error's exit code (tracebacks only
    with --debug)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _HELP_ERRORS:
            raise
        except click.ClickException as exc:
            _one_line(exc)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except FellowsError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"fellows-fsm: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except _HELP_ERRORS:
            raise
        except click.ClickException as exc:
            _one_line(exc)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Logs to whatever ``sys.stderr`` is at emit time (the live view and test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _configure_logging(debug: bool) -> None:
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("fellows-fsm: %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    # Errors reach the user as one line each; the library's warnings (retries, skipped polls) show in the
    # live view already, so they are only logged with --debug.
    root.setLevel(logging.DEBUG if debug else logging.ERROR)


def _remember_config(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    if value is not None:
        ctx.ensure_object(dict)["config_path"] = value
    return value


_CONFIG_HELP = (
    "The TOML config (default: $FELLOWS_FSM_CONFIG, else ./fellows.toml, else ~/.config/fellows-fsm/config.toml)."
)


def config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE`` on a subcommand too, so it may come before or after the command name."""
    return click.option(
        "--config",
        type=click.Path(dir_okay=False, path_type=Path),
        expose_value=False,
        callback=_remember_config,
        help=_CONFIG_HELP,
    )(func)


def config_of(ctx: click.Context) -> Config:
    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        obj["config"] = load_config(obj.get("config_path"))
    config: Config = obj["config"]
    return config


@contextmanager
def open_journal(config: Config, *, readonly: bool = False) -> Iterator[Journal]:
    journal = Journal(config.journal_path, readonly=readonly)
    try:
        yield journal
    finally:
        journal.close()


def find_row(journal: Journal, dispatch_id: str) -> DispatchRow:
    """The dispatch with this id, or the one whose id starts with it; UsageError (exit 2, one line) otherwise."""
    return find(journal, dispatch_id)


@contextmanager
def open_fellows(config: Config, scheduler: Scheduler | None = None, *, background: bool = True) -> Iterator[Fellows]:
    """The API on this config, through the seam: the port from ``make_scheduler``, grants from ``read_grants``,
    the background driver from ``start_driver``. ``background`` (the default for commands): dispatches are
    walked by the journal's background driver, never by the command's own process."""
    port = scheduler if scheduler is not None else make_scheduler(config)
    fellows = Fellows(
        config,
        scheduler=port,
        grants=lambda: read_grants(port),
        background=background,
        start_driver=lambda c, j: start_driver(c, j),  # noqa: PLW0108 - looked up at call time (the test seam)
        on_start=lambda owner: say_started(owner, config),
    )
    try:
        yield fellows
    finally:
        fellows.close()


def make_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    """A rich console; off a terminal it is wide, so piped tables are not cut at 80 columns."""
    console = Console(stderr=stderr, quiet=quiet)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 200
    return console


def echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


def next_lane_of(config: Config) -> str | None:
    """The lane a dispatch is handed to once every SLURM lane's ladder parked out (not the next SLURM lane: its
    rungs are on the one ladder), or None."""
    return config.after_ladder


# --------------------------------------------------------------------------- the command group
@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    expose_value=False,
    callback=_remember_config,
    help=_CONFIG_HELP,
)
@click.version_option(package_name="fellows-fsm")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Dispatch GPU jobs to the fellows SLURM cluster, walking its QoS ladder before GCP."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    _configure_logging(debug)
