"""The ``fellows-fsm`` command line: the only module that prints or configures logging.

Every FellowsError becomes one line on stderr and its own exit code (errors.py); ``--debug`` shows tracebacks.
The commands reach the cluster only through two module-level functions, the seam tests replace with
``monkeypatch.setattr``: ``make_scheduler(config)`` (the port) and ``read_grants(scheduler)`` (sacctmgr).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from fellows_fsm import diagram as diagrams
from fellows_fsm import sim
from fellows_fsm.api import Fellows, Progress
from fellows_fsm.config import Config, FellowsConfig, Ladder, LaneConfig, Rung, config_warnings, load_config
from fellows_fsm.errors import FellowsError, SchedulerError, SchedulerUnreachable, UsageError
from fellows_fsm.journal import DispatchRow, Journal
from fellows_fsm.lanes import FELLOWS
from fellows_fsm.records import RECENT, find, outcome_error, select
from fellows_fsm.scheduler import JobSpec, Phase, Scheduler
from fellows_fsm.slurm import Grants, SlurmScheduler, discover
from fellows_fsm.slurm.accounting import parse_duration
from fellows_fsm.slurm.render import owned_option
from fellows_fsm.ui.history import history_entries, history_table
from fellows_fsm.ui.ladder import ladder_report, ladder_table
from fellows_fsm.ui.live import dispatch_panel, watch_table
from fellows_fsm.ui.paths import dot_source, path_mermaid, svg
from fellows_fsm.ui.snapshot import Snapshot, dispatch_json
from fellows_fsm.ui.status import status_table
from fellows_fsm.ui.words import span

__all__ = ["main", "make_scheduler", "read_grants", "read_script_defaults"]

log = logging.getLogger(__name__)

INTERRUPTED = 130
"""Exit status after Ctrl-C: the dispatch goes on, detached."""
_REFRESH_SECONDS = 0.25
"""How often the live view redraws its countdowns between polls."""


# --------------------------------------------------------------------------- the seam to the cluster
def make_scheduler(config: Config) -> Scheduler:
    """The port every command uses: the real SLURM (tests replace this with a FakeScheduler)."""
    return SlurmScheduler()


def read_grants(scheduler: Scheduler) -> Grants:
    """What the cluster grants this user (two sacctmgr calls through the port's runner)."""
    if not isinstance(scheduler, SlurmScheduler):
        raise SchedulerError(f"reading grants needs the real SLURM port, not {type(scheduler).__name__}")
    return discover(scheduler.runner, scheduler.user)


# --------------------------------------------------------------------------- errors, logging, config
class _Group(click.Group):
    """Turns our errors into one clear line and the error's exit code (tracebacks only with --debug)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except FellowsError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"fellows-fsm: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


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


_CONFIG_HELP = "The TOML config (default: $FELLOWS_FSM_CONFIG, else ./fellows.toml)."


def _config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE`` on a subcommand too, so it may come before or after the command name."""
    return click.option(
        "--config",
        type=click.Path(dir_okay=False, path_type=Path),
        expose_value=False,
        callback=_remember_config,
        help=_CONFIG_HELP,
    )(func)


def _config(ctx: click.Context) -> Config:
    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        obj["config"] = load_config(obj.get("config_path"))
    config: Config = obj["config"]
    return config


@contextmanager
def _journal(config: Config, *, readonly: bool = False) -> Iterator[Journal]:
    journal = Journal(config.journal_path, readonly=readonly)
    try:
        yield journal
    finally:
        journal.close()


def _find(journal: Journal, dispatch_id: str) -> DispatchRow:
    """The dispatch with this id, or the one whose id starts with it; a click usage error otherwise."""
    try:
        return find(journal, dispatch_id)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


@contextmanager
def _fellows(config: Config, scheduler: Scheduler | None = None) -> Iterator[Fellows]:
    """The API on this config, through the seam: the port from ``make_scheduler``, grants from ``read_grants``."""
    port = scheduler if scheduler is not None else make_scheduler(config)
    fellows = Fellows(config, scheduler=port, grants=lambda: read_grants(port))
    try:
        yield fellows
    finally:
        fellows.close()


def _console(*, stderr: bool = False, quiet: bool = False) -> Console:
    """A rich console; off a terminal it is wide, so piped tables are not cut at 80 columns."""
    console = Console(stderr=stderr, quiet=quiet)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 200
    return console


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


def _next_lane(config: Config) -> str | None:
    return config.auto_order[1] if len(config.auto_order) > 1 else None


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


# --------------------------------------------------------------------------- submit
@attrs.frozen
class ScriptDefaults:
    """What an sbatch script's ``#SBATCH`` lines ask for (None when it does not say)."""

    gpus: int | None = None
    time_limit_seconds: int | None = None
    name: str | None = None


_OPTION_NAMES = {"--gres": "gres", "--gpus": "gpus", "-G": "gpus", "--time": "time", "-t": "time"}
_OPTION_NAMES |= {"--job-name": "name", "-J": "name"}


def _time_seconds(text: str, where: str) -> int | None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise UsageError(
            f"{where}: {text!r} is not a SLURM time; use MM, HH:MM:SS or D-HH:MM:SS (e.g. 1:00:00)"
        ) from None
    if seconds is not None and seconds <= 0:
        raise UsageError(f"{where}: {text!r} must be longer than zero")
    return seconds


def _gres_gpus(gres: str, where: str) -> int | None:
    """The GPU count of a ``--gres`` value (``gpu``, ``gpu:8``, ``gpu:a100:8``), None when it asks for no GPU.

    A count that is not a number (``gpu:abc``, or a type without a count) is refused rather than read as 0.
    """
    for item in gres.split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 1:
            return 1
        count = parts[-1].split("(")[0]
        if len(parts) > 3 or not count.isdigit():
            raise UsageError(
                f"{where}: --gres={gres!r} has no GPU count fellows-fsm can read; give it as gpu:N or gpu:TYPE:N, "
                "e.g. --gres=gpu:8"
            )
        return int(count)
    return None


def read_script_defaults(script: Path) -> ScriptDefaults:
    """Read ``--gres=gpu:N`` (or ``--gpus``), ``--time`` and ``--job-name`` from the script's #SBATCH lines.

    Like sbatch, it stops at the first line that is neither blank nor a comment; the last value wins.
    """
    found: dict[str, str] = {}
    lines = script.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(stripped.removeprefix("#SBATCH"), comments=True)
        except ValueError:
            continue
        i = 0
        while i < len(words):
            word = words[i]
            option, _, value = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
            key = _OPTION_NAMES.get(option)
            if key is not None:
                if not value and i + 1 < len(words):
                    i += 1
                    value = words[i]
                found[key] = value
                found[f"{key}@"] = f"{script.name}:{number}"
            i += 1
    gpus: int | None = None
    if "gres" in found:
        gpus = _gres_gpus(found["gres"], found["gres@"])
    if "gpus" in found:
        count = found["gpus"].rsplit(":", 1)[-1]
        if not count.isdigit():
            raise UsageError(f"{found['gpus@']}: --gpus={found['gpus']!r} is not a GPU count; give e.g. --gpus=8")
        gpus = int(count)
    limit = _time_seconds(found["time"], f"{found['time@']} --time") if "time" in found else None
    return ScriptDefaults(gpus=gpus, time_limit_seconds=limit, name=found.get("name"))


@main.command(context_settings={"show_default": True}, short_help="Dispatch an sbatch script and follow it.")
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SBATCH_ARGS...]")
@click.option("--intent", type=click.Choice(["prod", "debug"]), default="prod", help="debug starts on debug_qos.")
@click.option("--pin", metavar="LANE", help="Stay on one lane: 'fellows' (first rung only) or a command lane.")
@click.option("--detach", is_flag=True, help="Print the dispatch id and return; `watch` drives it.")
@click.option("--follow", is_flag=True, help="With --pin fellows: stay in the foreground until the job runs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the live view goes to stderr).")
@click.option(
    "--gpus", type=click.IntRange(min=0), metavar="N", help="GPUs (default: the script's #SBATCH --gres=gpu:N)."
)
@click.option("--time", "time_limit", metavar="LIMIT", help="Wall time, e.g. 4:00:00 (default: #SBATCH --time).")
@click.option("--name", help="Job name (default: #SBATCH --job-name, else the script's name).")
@_config_option
@click.pass_context
def submit(  # noqa: PLR0917 - click passes every option as an argument
    ctx: click.Context,
    script: Path,
    sbatch_args: tuple[str, ...],
    intent: str,
    pin: str | None,
    detach: bool,
    follow: bool,
    as_json: bool,
    gpus: int | None,
    time_limit: str | None,
    name: str | None,
) -> None:
    """Dispatch an sbatch SCRIPT through the router and follow it until it runs or reaches GCP.

    Options after `--` go to sbatch unchanged, except those fellows-fsm sets itself (--qos, --comment,
    --deadline, --job-name, --gres, --gpus, --time, ...), which are refused. Before the first sbatch the
    ladder is checked against what the cluster grants. `--pin fellows` returns once the job is queued
    (add --follow to stay). Ctrl-C detaches: the dispatch goes on, `watch` drives it. While another process
    drives the journal, the dispatch is enqueued for it and followed from here (driven from here once that
    process stops).
    """
    if (owned := owned_option(sbatch_args)) is not None:
        raise UsageError(f"sbatch option {owned[0]!r} after `--` is set by fellows-fsm itself: {owned[1]}")
    defaults = read_script_defaults(script)
    limit = _time_seconds(time_limit, "--time") if time_limit is not None else defaults.time_limit_seconds
    spec = _job_spec(
        name or defaults.name or script.stem,
        script.resolve(),
        gpus=gpus if gpus is not None else (defaults.gpus or 0),
        time_limit_seconds=limit,
        extra_args=sbatch_args,
    )
    config = _config(ctx)
    with _fellows(config) as fellows:
        # Before anything is journaled: the ladder against what the cluster grants (refusals raise here).
        checked = fellows.check(spec, intent=intent, pin=pin)
        for line in checked.warnings:
            click.echo(f"fellows-fsm: warning: {line}", err=True)
        if checked.refused is not None:
            raise checked.refused
        for line in checked.notes:
            click.echo(f"fellows-fsm: note: {line}", err=True)
        # Ctrl-C until the first job is queued withdraws the dispatch (Interrupted, exit 130); after, it detaches.
        submitted = fellows.submit(spec, intent=intent, pin=pin, check=checked)
        dispatch_id = submitted.dispatch_id
        journal = fellows.journal
        try:
            for note in submitted.notes:
                click.echo(f"fellows-fsm: note: {note}", err=True)
            if not submitted.driving:
                click.echo(
                    f"fellows-fsm: note: {journal.path} is driven by another router ({fellows.driver}): dispatch "
                    f"{dispatch_id} is enqueued for it{'' if detach else '; following it from here'}",
                    err=True,
                )
            queued_only = pin == FELLOWS and not follow
            if pin is not None and pin != FELLOWS and detach:
                # A pinned lane's command IS the submit: its result is the answer.
                if submitted.driving:
                    fellows.wait_for_handoffs()
                else:
                    fellows.follow(dispatch_id)
            elif queued_only and not submitted.driving:
                fellows.follow(dispatch_id, until=lambda _: fellows.handle(dispatch_id).slurm_job_id is not None)
            elif not detach and not queued_only and not submitted.handle.final:
                # With --json the live view goes to stderr, and only when that is a terminal.
                console = _console(stderr=as_json, quiet=as_json and not sys.stderr.isatty())
                _follow(fellows, dispatch_id, console)
        except KeyboardInterrupt:
            click.echo(
                f"detached: dispatch {dispatch_id} goes on; `fellows-fsm watch` drives it, "
                f"`fellows-fsm cancel {dispatch_id}` withdraws it",
                err=True,
            )
            ctx.exit(INTERRUPTED)
        row = journal.dispatch(dispatch_id)
        assert row is not None  # journaled before anything was submitted
        handoff = journal.handoff(row.id)
        if as_json:
            _echo_json(dispatch_json(row, handoff))
        elif detach and not row.final:
            click.echo(row.id)
        elif queued_only and not row.final:
            click.echo(
                f"dispatch {row.id} is queued on {row.qos} as SLURM job {row.job_id or '-'} (pinned: it stays "
                f"there); `fellows-fsm watch` follows it, `fellows-fsm cancel {row.id}` withdraws it"
            )
        else:
            click.echo(_summary(row.id, journal))
        error = outcome_error(journal, row.id)
    if error is not None:
        raise error


def _summary(dispatch_id: str, journal: Journal) -> str:
    row = journal.dispatch(dispatch_id)
    assert row is not None
    handoff = journal.handoff(dispatch_id)
    if row.label == "RUNNING":
        return f"dispatch {row.id} is RUNNING on {row.qos} as SLURM job {row.job_id}"
    if handoff is not None and row.outcome == "handed-off":
        return f"dispatch {row.id} was handed to {handoff.lane} ({shlex.join(handoff.argv)}: exit 0)"
    if not row.final:
        return f"dispatch {row.id} is {row.label} (SLURM job {row.job_id or '-'}); `fellows-fsm watch` drives it"
    if row.outcome.startswith("rejected"):
        return f"dispatch {row.id} was refused by SLURM ({row.outcome.removeprefix('rejected: ')})"
    if row.outcome == "no-fallback-lane":
        return f"dispatch {row.id} parked out of every rung, and no lane follows fellows in [router] order"
    return f"dispatch {row.id} ended as {row.label} ({row.outcome})"


@attrs.define
class _LiveState:
    """What the live view shows besides the journal: since when SLURM has not answered, the last failures."""

    unreachable_since: float | None = None
    message: str | None = None


def _follow(fellows: Fellows, dispatch_id: str, console: Console) -> None:
    """Follow one dispatch with a live view until it is final: driving every live dispatch while this process
    drives the journal, reading the journal while another process does (and taking over if it stops)."""
    journal = fellows.journal
    next_lane = _next_lane(fellows.config)
    state = _LiveState()

    def render() -> RenderableType:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        handoff = journal.handoff(dispatch_id)
        router = fellows.router
        live = next((d for d in router.on_ladder if d.id == dispatch_id), None) if router is not None else None
        snap = Snapshot.of_dispatch(live) if live is not None else Snapshot.of_row(row, handoff)
        entries = history_entries(row, journal.steps(dispatch_id), journal.jobs(dispatch_id), handoff)
        return dispatch_panel(
            snap,
            now=fellows.clock.now(),
            steps=entries,
            next_lane=next_lane,
            unreachable_since=state.unreachable_since,
            message=state.message,
        )

    _live(console, render, state, lambda on_tick, sleep: fellows.follow(dispatch_id, on_tick=on_tick, sleep=sleep))


_T = TypeVar("_T")


def _live(
    console: Console,
    render: Callable[[], RenderableType],
    state: _LiveState,
    run: Callable[[Callable[[Progress], None], Callable[[float], None]], _T],
) -> _T:
    """Run ``run(on_tick, sleep)`` (a follow or a watch) under a rich Live view, redrawn between polls too."""
    was_driving: list[bool] = []
    with Live(render(), console=console, auto_refresh=False, transient=False) as live:

        def on_tick(progress: Progress) -> None:
            if was_driving and not was_driving[-1] and progress.driving:
                click.echo(
                    "fellows-fsm: note: the router that drove the journal stopped; this process drives it now "
                    "(every live dispatch)",
                    err=True,
                )
            was_driving[:] = [progress.driving]
            report = progress.report
            if report is not None and report.unreachable:
                state.unreachable_since = state.unreachable_since or report.at
            else:
                state.unreachable_since = None
            state.message = "; ".join(report.failures) or None if report is not None else None
            live.update(render(), refresh=True)

        def sleep(seconds: float) -> None:
            end = time.monotonic() + seconds
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(_REFRESH_SECONDS, left))
                live.update(render(), refresh=True)

        result = run(on_tick, sleep)
        live.update(render(), refresh=True)
    if not console.is_terminal:
        console.line()  # rich ends the last frame with a newline only on a terminal
    return result


# --------------------------------------------------------------------------- watch
@main.command(short_help="Drive every live dispatch to the end.")
@click.option("--once", is_flag=True, help="Poll once, print where every dispatch stands, and return.")
@click.option("--json", "as_json", is_flag=True, help="Print the driven dispatches as a JSON list at the end.")
@_config_option
@click.pass_context
def watch(ctx: click.Context, once: bool, as_json: bool) -> None:
    """Drive every live dispatch in the journal (after a crash, a detach, or Ctrl-C) until each is final.

    While another process drives the journal, watch follows it read-only (saying who drives) and takes over
    as soon as that process stops; with --once it only shows where every dispatch stands.
    """
    config = _config(ctx)
    with _fellows(config) as fellows:
        journal = fellows.journal
        driving = fellows.drive()
        router = fellows.router
        ids = router.driven if router is not None else [r.id for r in journal.dispatches(live_only=True)]
        if not ids:
            if as_json:
                _echo_json([])
            else:
                click.echo(f"no live dispatches in {journal.path}")
            return
        console = _console(stderr=as_json, quiet=as_json and not sys.stderr.isatty())
        next_lane = _next_lane(config)
        for line in _created_with(config, journal, ids):
            click.echo(f"fellows-fsm: {line}", err=True)
        if not driving:
            then = "" if once else "; following it read-only, and driving once it stops"
            click.echo(
                f"fellows-fsm: note: {journal.path} is driven by another router ({fellows.driver}){then}", err=True
            )
        if once:
            report = fellows.poll() if driving else None
            for failure in report.failures if report is not None else ():
                click.echo(f"fellows-fsm: {failure}", err=True)
            if report is not None and report.unreachable:
                raise SchedulerUnreachable("SLURM did not answer this poll; the dispatches are unchanged")
        else:
            state = _LiveState()
            try:
                handles = _live(
                    console,
                    lambda: _watch_view(fellows, state, next_lane),
                    state,
                    lambda on_tick, sleep: fellows.watch(on_tick=on_tick, sleep=sleep),
                )
            except KeyboardInterrupt:
                click.echo("stopped: the dispatches go on; run `fellows-fsm watch` again to drive them", err=True)
                ctx.exit(INTERRUPTED)
            ids = list(dict.fromkeys([*ids, *(h.dispatch_id for h in handles)]))
        rows = [row for i in ids if (row := journal.dispatch(i)) is not None]
        if as_json:
            _echo_json([dispatch_json(r, journal.handoff(r.id)) for r in rows])
        else:
            snaps = [Snapshot.of_row(r, journal.handoff(r.id)) for r in rows]
            console.print(status_table(snaps, updated={r.id: r.updated_at for r in rows}))
        errors = [e for i in ids if (e := outcome_error(journal, i)) is not None]
    for extra in errors[1:]:
        click.echo(f"fellows-fsm: error: {extra}", err=True)
    if errors:
        raise errors[0]


def _watch_view(fellows: Fellows, state: _LiveState, next_lane: str | None) -> RenderableType:
    """The watch table: the router's live dispatches while this process drives, else the journal's."""
    now = fellows.clock.now()
    router = fellows.router
    if router is not None:
        snaps = [Snapshot.of_dispatch(d) for d in router.on_ladder]
        busy = router.busy
    else:
        journal = fellows.journal
        rows = journal.dispatches(live_only=True)
        snaps = [Snapshot.of_row(r, journal.handoff(r.id)) for r in rows]
        busy = bool(rows)
    if not snaps and not busy:
        return Text("every dispatch is final:", style="dim")
    parts: list[RenderableType] = [watch_table(snaps, now=now, next_lane=next_lane)]
    if state.unreachable_since is not None:
        gone = span(now - state.unreachable_since)
        parts.append(Text(f"SLURM not answering for {gone}; retrying with back-off", style="bold red"))
    if state.message:
        parts.append(Text(state.message, style="yellow"))
    return Group(*parts)


# --------------------------------------------------------------------------- status, history
_RECENT = RECENT
"""How many of the most recent dispatches `status` shows besides the live ones, unless --all or --last."""


@main.command(short_help="Where the live and recent dispatches stand.")
@click.argument("dispatch_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of dispatches.")
@click.option("--live", "live_only", is_flag=True, help="Only dispatches that are not final yet.")
@click.option("--all", "show_all", is_flag=True, help="Every dispatch in the journal, however many.")
@click.option(
    "--last", type=click.IntRange(min=0), default=_RECENT, show_default=True, metavar="N", help="Recent ones shown."
)
@_config_option
@click.pass_context
def status(  # noqa: PLR0917 - click passes every option as an argument
    ctx: click.Context, dispatch_id: str | None, as_json: bool, live_only: bool, show_all: bool, last: int
) -> None:
    """Where the live dispatches and the N most recent ones stand (or DISPATCH_ID, or --all of them).

    It only reads the journal, so it is safe while a router drives it.
    """
    config = _config(ctx)
    with _journal(config, readonly=True) as journal:  # read-only use: never the driver lock
        total = journal.count()
        if show_all and not dispatch_id and not as_json:
            # --all may list tens of thousands: read only the table's columns, parse no row's JSON.
            listed = journal.listings(live_only=live_only)
            if listed:
                _console().print(status_table(listed, updated={r.dispatch_id: r.updated_at for r in listed}))
            else:
                click.echo(f"no {'live ' if live_only else ''}dispatches in {journal.path}")
            return
        try:
            rows = select(journal, dispatch_id, live_only=live_only, last=None if show_all else last)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from None
        handoffs = {r.id: journal.handoff(r.id) for r in rows}
        if as_json:
            _echo_json([dispatch_json(r, handoffs[r.id]) for r in rows])
            return
        if not rows:
            click.echo(f"no {'live ' if live_only else ''}dispatches in {journal.path}")
            return
        snaps = [Snapshot.of_row(r, handoffs[r.id]) for r in rows]
        console = _console()
        console.print(status_table(snaps, updated={r.id: r.updated_at for r in rows}))
        if not dispatch_id and not show_all and len(rows) < total:
            which = "the live ones" if live_only else f"the live ones and the {last} most recent"
            console.print(f"{len(rows)} of {total:,} dispatches shown ({which}); --all shows every one", style="dim")


@main.command(short_help="Every transition of one dispatch.")
@click.argument("dispatch_id")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of transitions.")
@_config_option
@click.pass_context
def history(ctx: click.Context, dispatch_id: str, as_json: bool) -> None:
    """Every transition of DISPATCH_ID: time, from, to, trigger, QoS, SLURM job and pending reason."""
    config = _config(ctx)
    with _journal(config, readonly=True) as journal:
        row = _find(journal, dispatch_id)
        entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
    if as_json:
        _echo_json([e.as_json() for e in entries])
    else:
        _console().print(history_table(row, entries))


def _created_with(config: Config, journal: Journal, ids: Sequence[str]) -> list[str]:
    """One line per group of live dispatches created with another config than this watch's: they finish with
    the ladder, caps and fallback lane they were created with (journaled), not with this config's."""
    mine = config.source
    others: dict[str, list[str]] = {}
    for dispatch_id in ids:
        row = journal.dispatch(dispatch_id)
        source = row.settings.get("config") if row is not None else None
        if source is not None and source != mine:
            others.setdefault(str(source), []).append(dispatch_id)
    return [
        f"{len(found)} dispatch(es) ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}) were created with "
        f"{source}; they finish with the ladder, caps and fallback lane journaled then"
        for source, found in others.items()
    ]


# --------------------------------------------------------------------------- cancel
@main.command(short_help="Withdraw a dispatch and scancel its job.")
@click.argument("dispatch_id")
@_config_option
@click.pass_context
def cancel(ctx: click.Context, dispatch_id: str) -> None:
    """Withdraw DISPATCH_ID: scancel its SLURM jobs whatever their state, and mark it final (withdrawn).

    It takes the journal's driver lock, so stop a running `watch` first (it would otherwise resubmit).
    """
    config = _config(ctx)
    with _fellows(config) as fellows:
        try:
            job_ids = fellows.cancel(dispatch_id)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from None
        row = _find(fellows.journal, dispatch_id)
    jobs = ", ".join(job_ids) or "none"
    click.echo(f"dispatch {row.id} withdrawn (SLURM jobs cancelled: {jobs})")


# --------------------------------------------------------------------------- ladder, config check
@main.command(short_help="What the cluster grants you; the ladder.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--gpus", type=click.IntRange(min=0), metavar="N", default=8, show_default=True, help="The job to judge rungs for."
)
@click.option("--time", "time_limit", metavar="LIMIT", help="The job's wall time, e.g. 2-00:00:00.")
@_config_option
@click.pass_context
def ladder(ctx: click.Context, as_json: bool, gpus: int, time_limit: str | None) -> None:
    """What the cluster grants you (QoS, priority, max wall, per-user caps) and the effective ladder."""
    config = _config(ctx)
    limit = _time_seconds(time_limit, "--time") if time_limit is not None else None
    grants = read_grants(make_scheduler(config))
    report = ladder_report(config, grants, _job_spec("ladder-check", Path(), gpus, limit))
    if as_json:
        _echo_json(report.as_json())
    else:
        _console().print(ladder_table(report))


@main.group("config")
def config_group() -> None:
    """Check the configuration."""


@config_group.command("check", short_help="Load and print the effective config.")
@_config_option
@click.pass_context
def config_check(ctx: click.Context) -> None:
    """Load the config and print the effective ladder, caps, lanes and worst case (exit 3 if it is wrong).

    Warnings (a lane program not found here, a very fast poll) go to stderr and leave the exit status 0.
    """
    config = _config(ctx)
    for warning in config_warnings(config):
        click.echo(f"fellows-fsm: warning: {warning}", err=True)
    _console().print(_config_view(config))


def _config_view(config: Config) -> RenderableType:
    fellows = config.fellows
    rungs = Table(title=f"ladder ({config.source})", title_justify="left")
    for header in ("rung", "QoS", "park cap", "state"):
        rungs.add_column(header, no_wrap=True)
    for rung in fellows.ladder.rungs:
        rungs.add_row(str(rung.index + 1), rung.qos, span(rung.park_cap_seconds), rung.label)
    lanes = Table(title="lanes", title_justify="left")
    for header in ("lane", "command", "probe", "manual only", "timeout"):
        lanes.add_column(header)
    lanes.add_row("fellows", "(the SLURM ladder above)", "", "no", "")
    for lane in config.lanes:
        probe = " ".join(lane.probe) if lane.probe else "-"
        lanes.add_row(
            lane.name, " ".join(lane.command), probe, "yes" if lane.manual_only else "no", span(lane.timeout_seconds)
        )
    debug = (
        f"{fellows.debug_qos} (cap {span(fellows.debug_park_cap_seconds or fellows.park_cap_seconds)}, "
        f"name prefix {fellows.debug_name_prefix!r})"
        if fellows.debug_qos
        else "off"
    )
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("worst case", f"{span(fellows.worst_case_seconds)} on the ladder before {_next_lane(config) or '-'}")
    poll = fellows.poll_interval_seconds
    every = span(poll) if poll >= 1 else f"{poll:g}s"
    facts.add_row("poll", f"every {every} (one squeue for every live job)")
    facts.add_row("debug intent", debug)
    facts.add_row("order", " -> ".join(config.auto_order))
    derived = "" if config.router.max_rung_changes_per_tick is not None else " (derived from the poll interval)"
    facts.add_row("rung changes", f"at most {config.rung_changes_per_tick} per poll{derived}")
    facts.add_row("controller deadline", "on (sbatch --deadline)" if config.router.controller_deadline else "off")
    facts.add_row("journal", str(config.journal_path))
    return Group(rungs, lanes, facts, Text("config OK", style="bold green"))


# --------------------------------------------------------------------------- diagram
@main.command(short_help="Draw the state diagram (or a path).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "markdown", "dot", "svg"]),
    default="mermaid",
    show_default=True,
    help="mermaid: the diagram; markdown: the docs/state-diagram.md page; dot/svg need the [graphviz] extra.",
)
@click.option("--dispatch", "dispatch_id", metavar="ID", help="Draw the path this dispatch took, with times.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
@_config_option
@click.pass_context
def diagram(ctx: click.Context, fmt: str, dispatch_id: str | None, output: Path | None) -> None:
    """Draw the dispatch state diagram from the machine definition (optionally one dispatch's path on it)."""
    reference = FellowsConfig(park_cap_seconds=600.0)
    text: str | bytes
    if dispatch_id is None:
        if fmt == "markdown":
            text = diagrams.state_diagram_page(reference)
        elif fmt == "mermaid":
            text = diagrams.mermaid(reference.ladder)
        else:
            dot = dot_source(reference.ladder)
            text = dot if fmt == "dot" else svg(dot)
    else:
        if fmt == "markdown":
            raise click.BadParameter(
                "--dispatch draws mermaid, dot or svg, not the markdown page", param_hint="--format"
            )
        config = _config(ctx)
        with _journal(config, readonly=True) as journal:
            row = _find(journal, dispatch_id)
            entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
        if not row.ladder:
            raise click.BadParameter(f"dispatch {row.id} went straight to lane {row.lane}: it has no ladder path")
        path_ladder = Ladder(tuple(Rung(**r) for r in row.ladder))
        title = f"dispatch {row.id}"
        if fmt == "mermaid":
            text = path_mermaid(path_ladder, entries, title=title)
        else:
            dot = dot_source(path_ladder, entries, title=title)
            text = dot if fmt == "dot" else svg(dot)
    if output is None:
        if isinstance(text, bytes):
            click.echo(text, nl=False)
        else:
            click.echo(text, nl=False)
    elif isinstance(text, bytes):
        output.write_bytes(text)
    else:
        output.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- demo
_DEMO_LADDER = ("high-eur", "normal-eur", "low-eur")


@main.command(short_help="What-if: strategies and park caps on a simulated cluster.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), help="JSON-lines trace.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the built-in synthetic workload.")
@click.option("--hours", type=float, default=48.0, show_default=True, help="Length of the synthetic workload.")
@click.option(
    "--strategies",
    default=",".join(sim.DEFAULT_STRATEGIES),
    show_default=True,
    help="Comma list of static, single-timeout, ladder, reason-aware (park_early own-cap), predictive "
    "(park_early estimate), oracle, oracle-prefer.",
)
@click.option("--park-caps", default="60,300,600", show_default=True, help="Comma list of park caps (seconds).")
@click.option("--gpus", type=int, default=64, show_default=True, help="GPUs in the simulated cluster.")
@click.option(
    "--tier",
    "tiers",
    multiple=True,
    help="NAME:PRIORITY:CAP (CAP '-' for none), repeatable; default: the fellows tiers.",
)
@click.option("--poll-interval", type=float, default=10.0, show_default=True, help="The router's poll (s).")
@click.option("--gcp-start-seconds", type=float, default=0.0, show_default=True, help="GCP time to start.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of result objects.")
def simulate(
    *,
    trace_path: Path | None,
    seed: int,
    hours: float,
    strategies: str,
    park_caps: str,
    gpus: int,
    tiers: tuple[str, ...],
    poll_interval: float,
    gcp_start_seconds: float,
    as_json: bool,
) -> None:
    """Replay a workload through the real router on a simulated cluster, for each strategy and park cap.

    Without --trace it uses the built-in synthetic workload (seeded). Output: free-cluster share of your
    GPU-hours, p50/p95 time to start, GPU-hours sent to GCP and rung changes.
    """
    if trace_path is not None:
        trace = sim.load_trace(trace_path)
    else:
        trace = sim.synthetic_trace(seed=seed, hours=hours, gpus=gpus)
    params = sim.SimParams(
        gpus=gpus,
        tiers=tuple(sim.parse_tier(t) for t in tiers) if tiers else sim.FELLOWS_TIERS,
        poll_interval_seconds=poll_interval,
        gcp_start_seconds=gcp_start_seconds,
    )
    results = sim.run_sweep(
        trace,
        strategies=sim.parse_strategies(strategies),
        park_caps=sim.parse_park_caps(park_caps),
        params=params,
    )
    click.echo(sim.to_json(results) if as_json else sim.format_table(results))


@main.command(short_help="Walk the ladder live on the real SLURM.")
@click.option("--cap", type=click.FloatRange(min=1.0), default=5.0, show_default=True, help="Park cap per rung (s).")
@click.option("--keep", is_flag=True, help="Keep the demo's temporary state dir (journal) and print its path.")
def demo(cap: float, keep: bool) -> None:
    """Walk the ladder live on the real SLURM: fill your high-eur GPU cap, submit 8 GPUs, watch it move on.

    Needs a reachable SLURM with the fellows QoS tiers (scripts/dev-slurm up). It cancels its own jobs at the end.
    """
    console = _console()
    workdir = Path(tempfile.mkdtemp(prefix="fellows-fsm-demo-"))
    gcp = LaneConfig(
        name="gcp",
        command=(
            sys.executable,
            "-c",
            "import sys; print('demo: here the job would go to GCP as', sys.argv[1])",
            "fsm-{dispatch_id}",
        ),
    )
    ladder = FellowsConfig(
        qos=_DEMO_LADDER[0], qos_ladder=_DEMO_LADDER[1:], park_cap_seconds=cap, poll_interval_seconds=1.0
    )
    config = Config(fellows=ladder, lanes=(gcp,), state_dir=workdir / "state", source="demo")
    scheduler = make_scheduler(config)
    if not isinstance(scheduler, SlurmScheduler):
        raise SchedulerError(f"the demo runs on the real SLURM only, not on {type(scheduler).__name__}")
    job_ids: list[str] = []
    api: Fellows | None = None
    error: FellowsError | None = None
    try:
        _demo_check_cluster(scheduler, console)
        script = workdir / "sleep.sbatch"
        script.write_text("#!/bin/bash\n#SBATCH --time=10:00\nsleep 300\n", encoding="utf-8")
        job_args = (f"--chdir={workdir}", "--output=/dev/null")
        console.rule("1. what the cluster grants you (fellows-fsm ladder)")
        check = _job_spec("demo", script, gpus=8, time_limit_seconds=600)
        console.print(ladder_table(ladder_report(config, read_grants(scheduler), check)))
        console.rule("2. fill your own high-eur GPU cap (16) with two 8-GPU jobs")
        job_ids += _demo_fill(scheduler, _job_spec("demo-blocker", script, 8, 600, job_args))
        console.print(f"high-eur: jobs {', '.join(job_ids)} run 8 GPUs each, so your 16-GPU cap there is full")
        console.rule("3. submit an 8-GPU job: it pends on high-eur, parks, walks to normal-eur, runs")
        api = Fellows(config, scheduler=scheduler)
        error = _demo_walk(api, _job_spec("demo-train", script, 8, 600, job_args), console)
        console.rule("5. clean up")
    finally:
        if api is not None:
            journal = api.journal
            job_ids += [j.job_id for r in journal.dispatches() for j in journal.jobs(r.id)]
            api.close()
        _demo_clean_up(scheduler, job_ids, console)
        if keep:
            console.print(f"kept the demo's journal: {config.journal_path}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if error is not None:
        raise error


def _job_spec(
    name: str, script: Path, gpus: int = 0, time_limit_seconds: int | None = None, extra_args: Sequence[str] = ()
) -> JobSpec:
    """A JobSpec (one place for the ``extra_args`` converter, which mypy cannot see through)."""
    return JobSpec(
        name=name,
        script=str(script),
        gpus=gpus,
        time_limit_seconds=time_limit_seconds,
        extra_args=tuple(extra_args),
    )


def _demo_fill(scheduler: SlurmScheduler, blocker: JobSpec) -> list[str]:
    """Submit two 8-GPU jobs straight on high-eur through the port and wait until both run."""
    run_id = uuid.uuid4().hex[:8]
    ids = [scheduler.submit(blocker, qos="high-eur", token=f"fsm-demo-{run_id}-blocker{i}") for i in range(2)]
    _demo_wait_running(scheduler, ids)
    return ids


def _demo_walk(fellows: Fellows, spec: JobSpec, console: Console) -> FellowsError | None:
    """Dispatch ``spec``, follow it live, print its history; the error its outcome calls for, if any."""
    journal = fellows.journal
    handle = fellows.submit(spec, check=False).handle
    console.print(
        f"$ fellows-fsm submit {Path(spec.script).name}   (8 GPUs, --time 10:00: dispatch {handle.dispatch_id})"
    )
    _follow(fellows, handle.dispatch_id, console)
    console.print(_summary(handle.dispatch_id, journal))
    console.rule(f"4. fellows-fsm history {handle.dispatch_id}")
    row = journal.dispatch(handle.dispatch_id)
    assert row is not None
    entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), journal.handoff(row.id))
    console.print(history_table(row, entries))
    return outcome_error(journal, handle.dispatch_id)


def _demo_check_cluster(scheduler: SlurmScheduler, console: Console) -> None:
    conf = os.environ.get("SLURM_CONF", "(default)")
    ping = scheduler.runner.run(("scontrol", "ping"))
    if not ping.ok or "UP" not in ping.stdout:
        raise SchedulerUnreachable(
            f"SLURM does not answer (SLURM_CONF={conf}: {ping.message}); start the local one with "
            '`scripts/dev-slurm up && eval "$(scripts/dev-slurm env)"`'
        )
    console.print(f"SLURM answers ({ping.stdout.strip()}; SLURM_CONF={conf})")


def _demo_wait_running(scheduler: SlurmScheduler, job_ids: Sequence[str], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while True:
        seen = scheduler.observe(job_ids)
        if all(seen[j].phase is Phase.STARTED for j in job_ids):
            return
        if time.monotonic() > end:
            states = ", ".join(f"{j}: {seen[j].state} {seen[j].reason or ''}".strip() for j in job_ids)
            raise SchedulerError(
                f"the demo's high-eur jobs did not start within {timeout:g} s ({states}); other jobs of yours "
                "may hold the cap: `squeue --me`"
            )
        time.sleep(0.2)


def _demo_clean_up(scheduler: SlurmScheduler, job_ids: Sequence[str], console: Console) -> None:
    for job_id in dict.fromkeys(job_ids):
        try:
            scheduler.cancel([job_id])
        except FellowsError as exc:
            console.print(f"could not cancel job {job_id}: {exc}", style="red")
    if job_ids:
        console.print(f"cancelled the demo's jobs: {', '.join(dict.fromkeys(job_ids))}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
